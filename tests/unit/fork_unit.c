/* fork_unit - fork() in a process that never made a thread takes no
 * allocator lock (process.c), and the child can still do everything: every
 * class, large and huge blocks, caches made and destroyed, trim, flush; the
 * parent's blocks intact on both sides. Once a thread has existed, fork takes
 * every lock again, and the same child work must pass; a fork in the middle
 * of a purge leaves the child no units lost. */
#include "test.h"
#include "kmalloc_check.h"
#include "uslab.h"

#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

enum { NBLOCKS = 200 };
static void *blocks[NBLOCKS];
static size_t sizes[NBLOCKS];

static size_t size_of(int i)
{
	static const size_t big[] = { 40000, 300000, 3u << 20 };   /* large, large, huge */

	return i % 20 == 19 ? big[(i / 20) % 3] : (size_t)(1 + (i * 977) % 32768);
}

static void check_blocks(void)
{
	for (int i = 0; i < NBLOCKS; i++)
		CHECK(test_intact(blocks[i], sizes[i]));
}

/* What a child does: use every layer (each takes some lock the fork
 * handlers deal with), then check the inherited blocks and free them. */
static int child_work(void)
{
	void *mine[NBLOCKS];

	check_blocks();
	for (int i = 0; i < NBLOCKS; i++) {
		size_t n = size_of(i + 7);
		mine[i] = uslab_malloc(n);
		REQUIRE(mine[i] != NULL);
		test_fill(mine[i], n);
	}
	struct uslab_cache *c = uslab_cache_create("fork-child", 72, 0, 0, NULL);
	REQUIRE(c != NULL);
	void *o = uslab_cache_alloc(c);
	REQUIRE(o != NULL);
	uslab_cache_free(c, o);
	CHECK_EQ(uslab_cache_destroy(c), 0);
	for (int i = 0; i < NBLOCKS; i++) {
		CHECK(test_intact(mine[i], size_of(i + 7)));
		uslab_free(mine[i]);
	}
	for (int i = 0; i < NBLOCKS; i++)
		uslab_free(blocks[i]);
	uslab_thread_flush();
	uslab_trim();
	CHECK_EQ(kmalloc_validate_all(), 0);
	return test_failures ? 1 : 0;
}

static void fork_and_check(bool want_locks)
{
	pid_t pid = fork();

	REQUIRE(pid >= 0);
	if (pid == 0) {
		CHECK(uslab_fork_took_locks_() == want_locks);
		_exit(child_work());
	}
	CHECK(uslab_fork_took_locks_() == want_locks);
	int status;
	REQUIRE(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* the parent allocates at once too, and its blocks are untouched */
	void *p = uslab_malloc(100);
	CHECK(p != NULL);
	uslab_free(p);
	check_blocks();
}

/* fork() while a purge has units off the free maps (madvising them outside
 * seg_lock): the child has no purging thread, so its fork handler must give
 * them back, or they stay neither free nor in a run for good. The hook runs
 * in the middle of a purge; the child's walker would see such units as "in
 * use, heads no run". */
static pid_t purge_child;

static void fork_mid_purge(void)
{
	purge_test_hook = NULL;
	purge_child = fork();
	REQUIRE(purge_child >= 0);
	if (purge_child == 0) {
		void *p = uslab_malloc(300000);   /* segments usable in the child */
		bool ok = p != NULL && kmalloc_validate_all() == 0;
		uslab_free(p);
		uslab_trim();
		_exit(ok && kmalloc_validate_all() == 0 ? 0 : 1);
	}
}

static void check_fork_mid_purge(void)
{
	void *big[8];

	for (int i = 0; i < 8; i++)
		REQUIRE((big[i] = uslab_malloc(200000 + (size_t)i * 20000)) != NULL);
	for (int i = 0; i < 8; i++)
		uslab_free(big[i]);
	uslab_thread_flush();   /* the heap's kept runs back to their segments: dirty */
	purge_child = 0;
	purge_test_hook = fork_mid_purge;
	uslab_trim();           /* purges every dirty unit: the hook forks */
	purge_test_hook = NULL;
	REQUIRE(purge_child > 0);
	int status;
	REQUIRE(waitpid(purge_child, &status, 0) == purge_child);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK_EQ(kmalloc_validate_all(), 0);
}

static void *thread_main(void *arg)
{
	(void)arg;
	for (int i = 0; i < 1000; i++)
		uslab_free(uslab_malloc(size_of(i)));
	return NULL;
}

int main(void)
{
	for (int i = 0; i < NBLOCKS; i++) {
		sizes[i] = size_of(i);
		blocks[i] = uslab_malloc(sizes[i]);
		REQUIRE(blocks[i] != NULL);
		test_fill(blocks[i], sizes[i]);
	}
	/* no thread yet: no locks, three times over */
	for (int r = 0; r < 3; r++)
		fork_and_check(false);

	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, thread_main, NULL) == 0);
	REQUIRE(pthread_join(t, NULL) == 0);
	/* a thread has existed: every lock, each fork */
	for (int r = 0; r < 3; r++)
		fork_and_check(true);
	check_fork_mid_purge();

	for (int i = 0; i < NBLOCKS; i++)
		uslab_free(blocks[i]);
	CHECK_EQ(kmalloc_validate_all(), 0);
	return test_done("fork_unit");
}
