/* SPDX-License-Identifier: MIT */
/*
 * malloc_threads.c - the malloc family across threads, under LD_PRELOAD.
 *
 *   mixed          4 threads swap blocks of random sizes (1 B .. 64 KiB, some
 *                  large, a few huge) through a shared slot array; the
 *                  receiver checks the pattern, sometimes reallocs (content
 *                  kept), and frees: every free and realloc is cross-thread.
 *   short_threads  10,000 short-lived threads, 50 at a time, each leaving
 *                  blocks for a consumer thread and for main to free; peak
 *                  RSS (VmHWM) must stay bounded.
 *   prodcons       a producer allocates, a consumer that never allocates
 *                  frees: RSS must not grow while it runs.
 *   forkloop       4 threads allocate and free while main forks 150 times;
 *                  each child checks inherited blocks, allocates from its
 *                  thread and from a new one, and _exits 0. alarm() in the
 *                  child turns a deadlock into a failure.
 *   lines          two live threads allocating small blocks side by side
 *                  after the main thread alone: no 64-byte cache line holds
 *                  blocks of both (false sharing).
 *
 * Each phase runs in its own forked process, so each has its own VmHWM.
 * `malloc_threads PHASE` runs one phase. USLAB_TEST_ALLOW_GLIBC=1 runs the
 * test without the preload (against glibc); USLAB_STRESS_SECONDS scales the
 * timed phases.
 */
#define _GNU_SOURCE
#define USLAB_TEST_PRELOAD
#include "test.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static int on_uslab;

/* ---- helpers --------------------------------------------------------------------- */

/* A block travelling between threads, with what it must contain. */
struct item {
	struct item *next;
	char *p;
	size_t n;
	uint64_t seed;
};

static struct item *item_new(size_t n, uint64_t seed)
{
	struct item *it = malloc(sizeof(*it));

	REQUIRE(it);
	it->next = NULL;
	it->p = malloc(n);
	REQUIRE(it->p);
	it->n = n;
	it->seed = seed;
	test_fill_with(it->p, n, seed, TEST_FILL_SPARSE);
	return it;
}

/* Blocks are filled sparsely (test.h): the allocator, not the filling,
 * stays the bottleneck. */
static bool item_intact(const struct item *it)
{
	return test_check_with(it->p, it->n, it->n, it->seed, TEST_FILL_SPARSE) == it->n;
}

static atomic_long bad_blocks;

static void item_free(struct item *it)
{
	if (!item_intact(it)) {
		if (atomic_fetch_add(&bad_blocks, 1) < 10)
			fprintf(stderr, "block %p (%zu bytes) changed while another thread held it\n",
				(void *)it->p, it->n);
	}
	free(it->p);
	free(it);
}

/* 1 B .. 64 KiB, log-uniform (most blocks small, every class seen). */
static size_t rand_small(uint64_t *rs)
{
	uint64_t r = test_rand(rs);
	unsigned k = (unsigned)(r % 16);

	return ((size_t)1 << k) + (size_t)((r >> 8) % ((size_t)1 << k));
}

/* ---- phase: mixed-size cross-thread frees ---------------------------------------- */

enum { MIX_THREADS = 4, MIX_SLOTS = 4096 };

static _Atomic(struct item *) mix_slots[MIX_SLOTS];
static atomic_int mix_stop;
static atomic_long mix_ops, mix_reallocs;

static void *mix_worker(void *arg)
{
	uint64_t rs = 0xabcdef12345ull * (1 + (uintptr_t)arg);
	long ops = 0, reallocs = 0;

	while (!atomic_load_explicit(&mix_stop, memory_order_relaxed)) {
		uint64_t r = test_rand(&rs);
		size_t n;

		if (r % 1000 == 0)
			n = 2 * MiB + r % (2 * MiB);                  /* huge */
		else if (r % 100 == 1)
			n = 64 * KiB + (r >> 12) % (960 * KiB);        /* large */
		else
			n = rand_small(&rs);
		struct item *it = item_new(n, r);
		struct item *old = atomic_exchange(&mix_slots[(r >> 20) % MIX_SLOTS], it);
		ops++;
		if (!old)
			continue;
		/* one in 8: realloc the other thread's block first (grow or shrink) */
		if ((r >> 40) % 8 == 0) {
			size_t m = (r >> 44) % 4 == 0 ? 64 * KiB + (r >> 16) % (1536 * KiB)
						     : rand_small(&rs);
			size_t keep = old->n < m ? old->n : m;
			if (!item_intact(old)) {
				if (atomic_fetch_add(&bad_blocks, 1) < 10)
					fprintf(stderr, "block %p (%zu bytes) changed before realloc\n",
						(void *)old->p, old->n);
			}
			char *q = realloc(old->p, m);
			REQUIRE(q);
			if (test_check_with(q, keep, old->n, old->seed, TEST_FILL_SPARSE) != keep) {
				if (atomic_fetch_add(&bad_blocks, 1) < 10)
					fprintf(stderr, "realloc(%zu -> %zu) lost content\n", old->n, m);
			}
			old->p = q;
			old->n = m;
			old->seed = r * 3;
			test_fill_with(q, m, old->seed, TEST_FILL_SPARSE);
			reallocs++;
			/* and back into circulation, for a third thread to free */
			old = atomic_exchange(&mix_slots[(r >> 8) % MIX_SLOTS], old);
			if (!old)
				continue;
		}
		item_free(old);
	}
	atomic_fetch_add(&mix_ops, ops);
	atomic_fetch_add(&mix_reallocs, reallocs);
	return NULL;
}

static void phase_mixed(void)
{
	pthread_t t[MIX_THREADS];
	double secs = test_stress_seconds(2.0);

	for (int i = 0; i < MIX_THREADS; i++)
		REQUIRE(pthread_create(&t[i], NULL, mix_worker, (void *)(uintptr_t)i) == 0);
	usleep((useconds_t)(secs * 1e6));
	atomic_store(&mix_stop, 1);
	for (int i = 0; i < MIX_THREADS; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < MIX_SLOTS; i++) {
		struct item *it = atomic_exchange(&mix_slots[i], NULL);
		if (it)
			item_free(it);
	}
	CHECK_EQ(atomic_load(&bad_blocks), 0);
	printf("  mixed: %ld blocks, %ld cross-thread reallocs, VmHWM %ld MiB\n",
	       atomic_load(&mix_ops), atomic_load(&mix_reallocs), test_status_kb("VmHWM") / 1024);
}

/* ---- phase: 10,000 short-lived threads ------------------------------------------- */

enum { SHORT_THREADS = 10000, SHORT_BATCH = 50, SHORT_BLOCKS = 24 };
#define SHORT_HWM_LIMIT_KB (200L * 1024)

static pthread_mutex_t left_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t left_cond = PTHREAD_COND_INITIALIZER;
static struct item *left_list;
static long left_count;
static int short_done;

static void left_push(struct item *head, struct item *tail, long n)
{
	pthread_mutex_lock(&left_lock);
	tail->next = left_list;
	left_list = head;
	left_count += n;
	pthread_cond_signal(&left_cond);
	pthread_mutex_unlock(&left_lock);
}

/* Take the whole list (waits while empty unless `wait` is 0). */
static struct item *left_take(int wait)
{
	struct item *l;

	pthread_mutex_lock(&left_lock);
	while (wait && !left_list && !short_done)
		pthread_cond_wait(&left_cond, &left_lock);
	l = left_list;
	left_list = NULL;
	pthread_mutex_unlock(&left_lock);
	return l;
}

static atomic_long short_freed;

static void free_list(struct item *l)
{
	long n = 0;

	while (l) {
		struct item *next = l->next;
		item_free(l);
		l = next;
		n++;
	}
	atomic_fetch_add(&short_freed, n);
}

static void *short_consumer(void *arg)
{
	for (;;) {
		struct item *l = left_take(1);
		if (!l) {
			pthread_mutex_lock(&left_lock);
			int done = short_done && !left_list;
			pthread_mutex_unlock(&left_lock);
			if (done)
				return NULL;
			continue;
		}
		free_list(l);
	}
}

static void *short_thread(void *arg)
{
	uint64_t rs = 0x5eed0000ull + (uintptr_t)arg * 0x9E3779B97F4A7C15ull;
	struct item *head = NULL, *tail = NULL;
	void *local[8];

	for (int i = 0; i < SHORT_BLOCKS; i++) {
		size_t n = i == 0 && (uintptr_t)arg % 8 == 0 ? 40 * KiB + test_rand(&rs) % (200 * KiB)
							      : 1 + test_rand(&rs) % 2048;
		struct item *it = item_new(n, test_rand(&rs));
		if (!tail)
			tail = it;
		it->next = head;
		head = it;
	}
	/* some of its own churn, freed here */
	for (int i = 0; i < 8; i++) {
		local[i] = malloc(1 + test_rand(&rs) % 4096);
		REQUIRE(local[i]);
		memset(local[i], i, 1);
	}
	for (int i = 0; i < 8; i++)
		free(local[i]);
	left_push(head, tail, SHORT_BLOCKS);
	return NULL;
}

static void phase_short_threads(void)
{
	pthread_t consumer, t[SHORT_BATCH];
	pthread_attr_t attr;
	double t0 = test_now();
	long rss_max = 0;

	REQUIRE(pthread_create(&consumer, NULL, short_consumer, NULL) == 0);
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 128 * KiB);
	for (int b = 0; b < SHORT_THREADS / SHORT_BATCH; b++) {
		for (int i = 0; i < SHORT_BATCH; i++)
			REQUIRE(pthread_create(&t[i], &attr, short_thread,
					       (void *)(uintptr_t)(b * SHORT_BATCH + i)) == 0);
		for (int i = 0; i < SHORT_BATCH; i++)
			pthread_join(t[i], NULL);
		/* main frees every third batch's leftovers itself */
		if (b % 3 == 0)
			free_list(left_take(0));
		if (b % 20 == 0) {
			long rss = test_status_kb("VmRSS");
			if (rss > rss_max)
				rss_max = rss;
		}
	}
	pthread_attr_destroy(&attr);
	pthread_mutex_lock(&left_lock);
	short_done = 1;
	pthread_cond_broadcast(&left_cond);
	pthread_mutex_unlock(&left_lock);
	pthread_join(consumer, NULL);
	free_list(left_take(0));

	long hwm = test_status_kb("VmHWM");
	CHECK_EQ(atomic_load(&bad_blocks), 0);
	CHECK_EQ(atomic_load(&short_freed), (long)SHORT_THREADS * SHORT_BLOCKS);
	if (hwm > SHORT_HWM_LIMIT_KB) {
		fprintf(stderr, "short_threads: peak RSS %ld MiB > %ld MiB\n", hwm / 1024,
			SHORT_HWM_LIMIT_KB / 1024);
		test_failures++;
	}
	printf("  short_threads: %d threads, %ld blocks, VmHWM %ld MiB, VmRSS max %ld / end %ld MiB, %.2f s\n",
	       SHORT_THREADS, atomic_load(&short_freed), hwm / 1024, rss_max / 1024,
	       test_status_kb("VmRSS") / 1024, test_now() - t0);
}

/* ---- phase: producer -> consumer that only frees ---------------------------------- */

enum { RING = 4096 };   /* at most ~15 MiB in flight */
#define PC_GROWTH_LIMIT_KB (64L * 1024)
#define PC_HWM_LIMIT_KB (200L * 1024)

static char *ring[RING];
static atomic_ulong ring_head, ring_tail;   /* head: next to fill; tail: next to take */
static atomic_int pc_stop;
static atomic_long pc_bad, pc_freed;

/* Blocks carry their own size in the first word and a pattern after it. */
static void *pc_producer(void *arg)
{
	uint64_t rs = 99;

	while (!atomic_load_explicit(&pc_stop, memory_order_relaxed)) {
		uint64_t r = test_rand(&rs);
		size_t n = r % 100 == 0 ? 40 * KiB + (r >> 8) % (160 * KiB)   /* large */
			 : r % 10 == 1   ? 1 * KiB + (r >> 8) % (31 * KiB)
					 : 16 + (r >> 8) % 1009;
		char *p = malloc(n);
		REQUIRE(p);
		*(size_t *)p = n;
		test_fill_with(p + 8, n - 8, n, TEST_FILL_SPARSE);
		unsigned long h = atomic_load_explicit(&ring_head, memory_order_relaxed);
		while (h - atomic_load_explicit(&ring_tail, memory_order_acquire) >= RING) {
			if (atomic_load_explicit(&pc_stop, memory_order_relaxed)) {
				free(p);
				return NULL;
			}
			sched_yield();
		}
		ring[h % RING] = p;
		atomic_store_explicit(&ring_head, h + 1, memory_order_release);
	}
	return NULL;
}

/* Frees only: no malloc, no stdio in this thread. */
static void *pc_consumer(void *arg)
{
	long freed = 0, bad = 0;

	for (;;) {
		unsigned long t = atomic_load_explicit(&ring_tail, memory_order_relaxed);
		if (t == atomic_load_explicit(&ring_head, memory_order_acquire)) {
			if (atomic_load_explicit(&pc_stop, memory_order_acquire) == 2)
				break;
			sched_yield();
			continue;
		}
		char *p = ring[t % RING];
		size_t n = *(size_t *)p;
		if (n < 16 || n > 200 * KiB ||
		    test_check_with(p + 8, n - 8, n - 8, n, TEST_FILL_SPARSE) != n - 8)
			bad++;
		free(p);
		freed++;
		atomic_store_explicit(&ring_tail, t + 1, memory_order_release);
	}
	atomic_store(&pc_bad, bad);
	atomic_store(&pc_freed, freed);
	return NULL;
}

static void phase_prodcons(void)
{
	pthread_t prod, cons;
	double secs = test_stress_seconds(2.0), t0 = test_now();
	long warm = -1, rss_max = 0;

	REQUIRE(pthread_create(&cons, NULL, pc_consumer, NULL) == 0);
	REQUIRE(pthread_create(&prod, NULL, pc_producer, NULL) == 0);
	while (test_now() - t0 < secs) {
		usleep(50 * 1000);
		long rss = test_status_kb("VmRSS");
		if (warm < 0 && test_now() - t0 >= secs / 4)
			warm = rss;
		else if (warm >= 0 && rss > rss_max)
			rss_max = rss;
	}
	atomic_store(&pc_stop, 1);
	pthread_join(prod, NULL);
	atomic_store(&pc_stop, 2);   /* the consumer drains the ring, then stops */
	pthread_join(cons, NULL);

	long hwm = test_status_kb("VmHWM");
	CHECK_EQ(atomic_load(&pc_bad), 0);
	CHECK_EQ((long)atomic_load(&ring_head), atomic_load(&pc_freed));
	if (warm >= 0 && rss_max - warm > PC_GROWTH_LIMIT_KB) {
		fprintf(stderr, "prodcons: RSS grew from %ld to %ld MiB while the consumer freed\n",
			warm / 1024, rss_max / 1024);
		test_failures++;
	}
	if (hwm > PC_HWM_LIMIT_KB) {
		fprintf(stderr, "prodcons: peak RSS %ld MiB > %ld MiB\n", hwm / 1024,
			PC_HWM_LIMIT_KB / 1024);
		test_failures++;
	}
	printf("  prodcons: %ld blocks through the ring, RSS after warm-up %ld MiB, max %ld MiB, VmHWM %ld MiB\n",
	       atomic_load(&pc_freed), warm / 1024, rss_max / 1024, hwm / 1024);
}

/* ---- phase: fork from a threaded program ------------------------------------------- */

enum { FORK_THREADS = 4, FORKS = 120, FORK_SLOTS = 1024 };

static _Atomic(struct item *) fork_slots[FORK_SLOTS];
static atomic_int fork_stop;

static void *fork_worker(void *arg)
{
	uint64_t rs = 0xf0f0f0ull * (1 + (uintptr_t)arg);
	void *local[16] = { 0 };

	while (!atomic_load_explicit(&fork_stop, memory_order_relaxed)) {
		uint64_t r = test_rand(&rs);
		size_t n = r % 200 == 0 ? 64 * KiB + (r >> 8) % MiB
			 : r % 2000 == 1 ? 3 * MiB : rand_small(&rs) % 8192 + 1;
		struct item *it = item_new(n, r);
		struct item *old = atomic_exchange(&fork_slots[(r >> 24) % FORK_SLOTS], it);
		if (old)
			item_free(old);
		unsigned k = (unsigned)(r >> 50) % 16;
		free(local[k]);
		local[k] = malloc((r >> 32) % 512);
	}
	for (int k = 0; k < 16; k++)
		free(local[k]);
	return NULL;
}

/* Child-side failure: a message with write(2) only, then _exit. */
static void child_fail(const char *msg)
{
	if (write(2, msg, strlen(msg)) < 0)
		_exit(2);
	_exit(1);
}

static void child_churn(uint64_t seed)
{
	uint64_t rs = seed;
	char *blk[64];
	size_t len[64];

	for (int round = 0; round < 1; round++) {
		for (int i = 0; i < 64; i++) {
			uint64_t r = test_rand(&rs);
			len[i] = i == 0 ? 3 * MiB : i == 1 ? 100 * KiB : 1 + r % 3000;
			blk[i] = malloc(len[i]);
			if (!blk[i])
				child_fail("fork child: malloc failed\n");
			test_fill_with(blk[i], len[i], (uintptr_t)blk[i], TEST_FILL_SPARSE);
		}
		for (int i = 0; i < 64; i++) {
			if (test_check_with(blk[i], len[i], len[i], (uintptr_t)blk[i],
					    TEST_FILL_SPARSE) != len[i])
				child_fail("fork child: block content changed\n");
			free(blk[i]);
		}
	}
}

static void *child_thread(void *arg)
{
	child_churn((uintptr_t)arg);
	return NULL;
}

/* How far each child got, in memory shared with the parent: a child that
 * hangs inside fork() itself (in the allocator's atfork child handler) never
 * reaches its alarm(), so the parent needs to know where it stopped. */
enum { STAGE_NONE, STAGE_FORKED, STAGE_INHERITED, STAGE_CHURNED, STAGE_THREAD };
static const char *const stage_name[] = {
	"inside fork() (the atfork child handlers)", "freeing inherited blocks",
	"malloc/free in the child", "malloc/free in a thread of the child", "exit",
};
static volatile int *fork_stage;

static void fork_child(struct item *pre, int i)
{
	fork_stage[i] = STAGE_FORKED;
	alarm(10);   /* a deadlock from here on ends the child with SIGALRM */
	/* blocks inherited from the parent: from main, and from worker threads
	 * that do not exist here */
	if (!item_intact(pre))
		child_fail("fork child: inherited block changed\n");
	free(pre->p);
	free(pre);
	for (int k = 0; k < 32; k++) {
		struct item *it = atomic_exchange(&fork_slots[(i * 37 + k) % FORK_SLOTS], NULL);
		if (!it)
			continue;
		if (!item_intact(it))
			child_fail("fork child: a worker's block changed\n");
		free(it->p);
		free(it);
	}
	fork_stage[i] = STAGE_INHERITED;
	child_churn(0x1000 + (uint64_t)i);
	fork_stage[i] = STAGE_CHURNED;
	pthread_t t;
	if (pthread_create(&t, NULL, child_thread, (void *)(uintptr_t)(0x2000 + i)) ||
	    pthread_join(t, NULL))
		child_fail("fork child: thread failed\n");
	fork_stage[i] = STAGE_THREAD;
	_exit(0);
}

/* Wait for pid up to `secs`; SIGKILL it after that. Returns 1 if it hung. */
static int wait_or_kill(pid_t pid, int *status, double secs)
{
	double t0 = test_now();

	for (;;) {
		pid_t r = waitpid(pid, status, WNOHANG);
		if (r == pid)
			return 0;
		REQUIRE(r == 0 || errno == EINTR);
		if (test_now() - t0 > secs) {
			kill(pid, SIGKILL);
			REQUIRE(waitpid(pid, status, 0) == pid);
			return 1;
		}
		usleep(1000);
	}
}

static void phase_forkloop(void)
{
	pthread_t t[FORK_THREADS];
	int failed = 0, hung = 0, forks = 0;
	double t0 = test_now();

	fork_stage = mmap(NULL, FORKS * sizeof(int), PROT_READ | PROT_WRITE,
			  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	REQUIRE(fork_stage != MAP_FAILED);
	for (int i = 0; i < FORK_THREADS; i++)
		REQUIRE(pthread_create(&t[i], NULL, fork_worker, (void *)(uintptr_t)i) == 0);
	usleep(50 * 1000);
	for (int i = 0; i < FORKS && hung < 2; i++) {
		struct item *pre = item_new(1 + (size_t)i * 997 % 70000, (uint64_t)i * 11);
		fflush(stdout);
		fflush(stderr);
		pid_t pid = fork();
		REQUIRE(pid >= 0);
		if (pid == 0)
			fork_child(pre, i);
		forks++;
		int status;
		if (wait_or_kill(pid, &status, 10.0)) {
			hung++;
			failed++;
			fprintf(stderr, "fork child %d: hung %s; killed\n", i, stage_name[fork_stage[i]]);
		} else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			if (failed++ < 10) {
				if (WIFSIGNALED(status))
					fprintf(stderr, "fork child %d: killed by signal %d (%s) during %s\n",
						i, WTERMSIG(status), strsignal(WTERMSIG(status)),
						stage_name[fork_stage[i]]);
				else
					fprintf(stderr, "fork child %d: exit status %d\n", i,
						WEXITSTATUS(status));
			}
		}
		/* the parent's copy is untouched by the child's frees */
		if (!item_intact(pre)) {
			fprintf(stderr, "fork %d: parent's block changed\n", i);
			test_failures++;
		}
		item_free(pre);
	}
	atomic_store(&fork_stop, 1);
	for (int i = 0; i < FORK_THREADS; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < FORK_SLOTS; i++) {
		struct item *it = atomic_exchange(&fork_slots[i], NULL);
		if (it)
			item_free(it);
	}
	if (hung >= 2)
		fprintf(stderr, "forkloop: stopped after %d hung children\n", hung);
	CHECK_EQ(failed, 0);
	CHECK_EQ(atomic_load(&bad_blocks), 0);
	printf("  forkloop: %d forks, %d failed (%d hung), %.2f s\n", forks, failed, hung,
	       test_now() - t0);
}

/* ---- driver --------------------------------------------------------------------- */

/* ---- lines: two live threads' blocks never share a cache line ------------ */

enum { LINE = 64, LINE_BLOCKS = 200 };
static const size_t line_sizes[] = { 16, 48, 64, 100 };
#define LINE_N (LINE_BLOCKS * (sizeof(line_sizes) / sizeof(line_sizes[0])))
static char *line_blocks[2][LINE_N];
static pthread_barrier_t line_barrier;

static void *line_worker(void *arg)
{
	int t = (int)(uintptr_t)arg;

	pthread_barrier_wait(&line_barrier);   /* both alive, allocating together */
	for (size_t i = 0; i < LINE_N; i++) {
		size_t n = line_sizes[i % (sizeof(line_sizes) / sizeof(line_sizes[0]))];

		line_blocks[t][i] = malloc(n);
		REQUIRE(line_blocks[t][i] != NULL);
		memset(line_blocks[t][i], 'a' + t, n);
		if (i % 16 == 0)
			sched_yield();   /* interleave the two threads' requests */
	}
	pthread_barrier_wait(&line_barrier);   /* both keep their blocks until checked */
	pthread_barrier_wait(&line_barrier);
	for (size_t i = 0; i < LINE_N; i++)
		free(line_blocks[t][i]);
	return NULL;
}

static int cmp_uptr(const void *a, const void *b)
{
	uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * Blocks two live threads allocate side by side: no 64-byte line may hold
 * bytes of both, or each thread's writes would evict the other's line
 * (false sharing). A slab per thread gives that; the start-up arena, which
 * packs blocks densely, must have ended when the second thread started. The
 * main thread allocates first, alone, as a program starting up does.
 */
static void phase_lines(void)
{
	pthread_t th[2];
	void *early[64];
	static uintptr_t lines[2][LINE_N * 3];
	size_t nl[2] = { 0, 0 };

	for (int i = 0; i < 64; i++)
		REQUIRE((early[i] = malloc(16 + (size_t)i * 8)) != NULL);
	REQUIRE(pthread_barrier_init(&line_barrier, NULL, 3) == 0);
	for (int t = 0; t < 2; t++)
		REQUIRE(pthread_create(&th[t], NULL, line_worker, (void *)(uintptr_t)t) == 0);
	pthread_barrier_wait(&line_barrier);
	pthread_barrier_wait(&line_barrier);
	for (int t = 0; t < 2; t++) {
		for (size_t i = 0; i < LINE_N; i++) {
			uintptr_t p = (uintptr_t)line_blocks[t][i];
			size_t n = line_sizes[i % (sizeof(line_sizes) / sizeof(line_sizes[0]))];

			CHECK((unsigned char)line_blocks[t][i][n - 1] == 'a' + t);
			for (uintptr_t l = p / LINE; l <= (p + n - 1) / LINE; l++)
				lines[t][nl[t]++] = l;
		}
		qsort(lines[t], nl[t], sizeof(uintptr_t), cmp_uptr);
	}
	size_t shared = 0;
	for (size_t i = 0, j = 0; i < nl[0] && j < nl[1];) {
		if (lines[0][i] == lines[1][j]) {
			shared++;
			i++;
			j++;
		} else if (lines[0][i] < lines[1][j]) {
			i++;
		} else {
			j++;
		}
	}
	if (on_uslab)
		CHECK_EQ(shared, 0);
	else
		printf("  lines: %zu cache lines hold blocks of both threads\n", shared);
	pthread_barrier_wait(&line_barrier);
	for (int t = 0; t < 2; t++)
		REQUIRE(pthread_join(th[t], NULL) == 0);
	for (int i = 0; i < 64; i++)
		free(early[i]);
}

static const struct {
	const char *name;
	void (*fn)(void);
} phases[] = {
	{ "mixed", phase_mixed },
	{ "short_threads", phase_short_threads },
	{ "prodcons", phase_prodcons },
	{ "forkloop", phase_forkloop },
	{ "lines", phase_lines },
};

int main(int argc, char **argv)
{
	on_uslab = test_require_uslab();
	alarm(280);   /* below ctest's timeout: a hang shows up as SIGALRM */
	for (unsigned i = 0; i < sizeof(phases) / sizeof(phases[0]); i++) {
		if (argc > 1 && strcmp(argv[1], phases[i].name))
			continue;
		double t0 = test_now();
		fflush(stdout);
		fflush(stderr);
		pid_t pid = fork();
		REQUIRE(pid >= 0);
		if (pid == 0) {
			alarm(120);
			phases[i].fn();
			fflush(stdout);
			_exit(test_failures ? 1 : 0);
		}
		int status;
		while (waitpid(pid, &status, 0) < 0)
			REQUIRE(errno == EINTR);
		int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
		if (!ok) {
			test_failures++;
			if (WIFSIGNALED(status))
				fprintf(stderr, "phase %s: killed by signal %d (%s)\n", phases[i].name,
					WTERMSIG(status), strsignal(WTERMSIG(status)));
		}
		printf("  %-14s %s (%.2f s)\n", phases[i].name, ok ? "ok" : "FAILED", test_now() - t0);
	}
	return test_done("malloc_threads");
}
