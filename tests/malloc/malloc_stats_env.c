/* SPDX-License-Identifier: MIT */
/*
 * malloc_stats_env - the statistics of the preloaded library, seen from a
 * program (tests/real/stats_env.sh covers the options with real programs).
 *
 *   exit_dump   a child run with USLAB_STATS_FILE creates a cache, allocates
 *               1000 objects and frees 600 (some from a second thread), and
 *               exits: its exit-time JSON counts exactly that, and the
 *               kmalloc counts add up (allocs - frees == live)
 *   file_api    uslab_stats_json() and uslab_stats_print() to a stdio FILE
 *               whose buffer is not allocated yet, called by a thread whose
 *               first allocation is that buffer: must not deadlock (the
 *               report walks the caches under the allocator's locks, and
 *               fwrite allocates); alarm() turns a hang into a failure
 *   mallinfo    mallinfo2() and the JSON agree on mapped, in-use and huge
 *               bytes; malloc_stats() writes uslab's report
 * Each phase runs in its own process; `malloc_stats_env PHASE` runs one.
 */
#define _GNU_SOURCE
#define USLAB_TEST_PRELOAD
#include "test.h"
#include "stats_json.h"

#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

/* The library's own names, found at run time (the test links only libc). */
static struct {
	struct uslab_cache *(*cache_create)(const char *, size_t, size_t, unsigned,
					    void (*)(void *));
	void *(*cache_alloc)(struct uslab_cache *);
	void (*cache_free)(struct uslab_cache *, void *);
	void (*stats_json)(FILE *);
	void (*stats_print)(FILE *);
} u;

static void find_api(void)
{
	*(void **)&u.cache_create = dlsym(RTLD_DEFAULT, "uslab_cache_create");
	*(void **)&u.cache_alloc = dlsym(RTLD_DEFAULT, "uslab_cache_alloc");
	*(void **)&u.cache_free = dlsym(RTLD_DEFAULT, "uslab_cache_free");
	*(void **)&u.stats_json = dlsym(RTLD_DEFAULT, "uslab_stats_json");
	*(void **)&u.stats_print = dlsym(RTLD_DEFAULT, "uslab_stats_print");
	REQUIRE(u.cache_create && u.cache_alloc && u.cache_free && u.stats_json &&
		u.stats_print);
}

/* The JSON written with no allocation between the caller's snapshot and
 * the report: into a temporary file with a static stdio buffer. */
static char *json_now_after(void (*snapshot)(void))
{
	static char iobuf[1 << 20];
	char path[] = "/tmp/uslab-stats-mi-XXXXXX";
	int fd = mkstemp(path);
	FILE *f;

	REQUIRE(fd >= 0);
	f = fdopen(fd, "w");
	REQUIRE(f && setvbuf(f, iobuf, _IOFBF, sizeof(iobuf)) == 0);
	snapshot();
	u.stats_json(f);
	fclose(f);
	char *text = test_read_file(path);
	unlink(path);
	REQUIRE(text);
	return text;
}

/* ---- exit_dump ------------------------------------------------------------------------ */

#define PROBE_ALLOCS 1000
#define PROBE_FREES  600

static struct uslab_cache *probe;
static void *probe_obj[PROBE_ALLOCS];

static void *free_some(void *arg)
{
	/* remote frees: objects of slabs the main thread froze */
	for (int i = 0; i < 200; i++)
		u.cache_free(probe, probe_obj[i]);
	return arg;
}

/* The child: known work, then a normal exit (the library writes the JSON). */
static int exit_dump_child(void)
{
	pthread_t t;

	find_api();
	probe = u.cache_create("env-probe", 48, 0, 0, NULL);
	REQUIRE(probe);
	for (int i = 0; i < PROBE_ALLOCS; i++)
		REQUIRE((probe_obj[i] = u.cache_alloc(probe)) != NULL);
	REQUIRE(pthread_create(&t, NULL, free_some, NULL) == 0);
	pthread_join(t, NULL);
	for (int i = 200; i < PROBE_FREES; i++)
		u.cache_free(probe, probe_obj[i]);
	static void *volatile blk;
	test_end_startup_arena();   /* then the blocks below come from kmalloc caches */
	for (int i = 0; i < 5000; i++) {
		blk = malloc(100 + i % 900);
		free(blk);
	}
	exit(0);
}

static void test_exit_dump(const char *self)
{
	char path[] = "/tmp/uslab-stats-env-XXXXXX";
	int fd = mkstemp(path);
	pid_t pid;
	int status;

	REQUIRE(fd >= 0);
	close(fd);
	unlink(path);   /* the library must create it */
	fflush(NULL);
	pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		setenv("USLAB_STATS_FILE", path, 1);
		execl(self, self, "--exit-dump-child", (char *)NULL);
		_exit(127);
	}
	REQUIRE(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

	char *json = test_read_file(path);
	struct stats_obj o;

	if (!json) {
		fprintf(stderr, "exit_dump: USLAB_STATS_FILE=%s was not written at exit\n", path);
		test_failures++;
		return;
	}
	unlink(path);
	CHECK(strstr(json, "\"caches\": [") != NULL);
	CHECK(stats_json_top(json, "mapped_bytes") > 0);
	if (!stats_json_cache(json, "env-probe", &o)) {
		fprintf(stderr, "exit_dump: no env-probe cache in the dump\n");
		test_failures++;
	} else {
		CHECK_EQ(stats_obj_allocs(&o), PROBE_ALLOCS);
		CHECK_EQ(stats_obj_frees(&o), PROBE_FREES);
		CHECK_EQ(stats_obj_get(&o, "live_objects"), PROBE_ALLOCS - PROBE_FREES);
	}
	/* every kmalloc cache: allocs - frees == live, slabs == new - freed */
	int caches = 0;
	for (const char *p = strstr(json, "{\"name\": \"kmalloc-"); p;
	     p = strstr(p + 1, "{\"name\": \"kmalloc-")) {
		char name[32];
		if (sscanf(p, "{\"name\": \"%31[^\"]\"", name) != 1)
			continue;
		REQUIRE(stats_json_cache(json, name, &o));
		caches++;
		long live = stats_obj_get(&o, "live_objects");
		if (stats_obj_allocs(&o) - stats_obj_frees(&o) != live ||
		    stats_obj_get(&o, "slabs") !=
			    stats_obj_get(&o, "new_slab") - stats_obj_get(&o, "slab_freed")) {
			fprintf(stderr, "exit_dump: %s does not add up: %.*s\n", name,
				(int)(o.end - o.begin + 1), o.begin);
			test_failures++;
		}
	}
	CHECK(caches > 0);
	free(json);
}

/* ---- file_api ----------------------------------------------------------------------------- */

static void *report_to(void *arg)
{
	FILE *f = arg;

	u.stats_json(f);
	u.stats_print(f);
	return NULL;
}

static int file_api_child(void)
{
	char path[] = "/tmp/uslab-stats-file-XXXXXX";
	int fd = mkstemp(path);
	FILE *f;
	pthread_t t;

	find_api();
	REQUIRE(fd >= 0);
	f = fdopen(fd, "w");   /* its buffer comes with the first write */
	REQUIRE(f);
	/* many caches with live objects: a report much longer than the 4 KiB
	 * the library formats at a time (volatile: no malloc/free elision) */
	static void *volatile keep[2000];
	test_end_startup_arena();   /* every class in slabs, each with its report row */
	for (int i = 0; i < 2000; i++)
		REQUIRE((keep[i] = malloc((size_t)(8 + i * 16))) != NULL);
	alarm(10);
	REQUIRE(pthread_create(&t, NULL, report_to, f) == 0);
	pthread_join(t, NULL);
	alarm(0);
	fclose(f);

	char *text = test_read_file(path);
	unlink(path);
	REQUIRE(text);
	CHECK(strncmp(text, "{\n  \"uslab_version\"", 19) == 0);
	CHECK(strstr(text, "\n  ]\n}\n") != NULL);
	CHECK(strstr(text, "\nuslab statistics (dwcas: ") != NULL);
	CHECK(strlen(text) > 16384);
	free(text);
	for (int i = 0; i < 2000; i++)
		free(keep[i]);
	return test_done("malloc_stats_env file_api");
}

/* ---- mallinfo ----------------------------------------------------------------------------- */

static struct mallinfo2 mi;
static void take_mallinfo(void)
{
	mi = mallinfo2();
}

static int mallinfo_child(void)
{
	static void *volatile big;   /* volatile: the compiler may not elide it */
	void *small[100];

	find_api();
	big = malloc(8 << 20);   /* a huge block (own mapping) */
	REQUIRE(big);
	memset(big, 1, 4096);
	for (int i = 0; i < 100; i++)
		small[i] = malloc(64 + (size_t)i * 40);
	char *json = json_now_after(take_mallinfo);

	CHECK_EQ(mi.arena, stats_json_top(json, "mapped_bytes"));
	CHECK_EQ(mi.uordblks, stats_json_top(json, "in_use_bytes"));
	CHECK_EQ(mi.hblks, stats_json_top(json, "huge_blocks"));
	CHECK_EQ(mi.hblkhd, stats_json_top(json, "huge_bytes"));
	CHECK(mi.hblks >= 1 && mi.hblkhd >= (8 << 20));
	free(json);

	/* malloc_stats() writes uslab's report on stderr */
	FILE *cap = tmpfile();
	int saved = dup(2);
	char buf[2048];
	REQUIRE(cap && saved >= 0);
	fflush(stderr);
	dup2(fileno(cap), 2);
	malloc_stats();
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	rewind(cap);
	buf[fread(buf, 1, sizeof(buf) - 1, cap)] = 0;
	fclose(cap);
	CHECK(strncmp(buf, "uslab (dwcas: ", 14) == 0);
	CHECK(strstr(buf, "system bytes") != NULL);

	for (int i = 0; i < 100; i++)
		free(small[i]);
	free(big);
	return test_done("malloc_stats_env mallinfo");
}

/* ---- driver ----------------------------------------------------------------------------------- */

static void run_phase(const char *self, const char *phase)
{
	pid_t pid;
	int status;

	fflush(NULL);
	pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		execl(self, self, phase, (char *)NULL);
		_exit(127);
	}
	REQUIRE(waitpid(pid, &status, 0) == pid);
	if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) {
		fprintf(stderr, "%s: hung for 10 s (deadlock?)\n", phase);
		test_failures++;
	} else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "%s: failed (status 0x%x)\n", phase, status);
		test_failures++;
	}
}

int main(int argc, char **argv)
{
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	test_require_uslab();
	REQUIRE(n > 0);
	self[n] = 0;
	if (argc > 1 && strcmp(argv[1], "--exit-dump-child") == 0)
		return exit_dump_child();
	if (argc > 1 && strcmp(argv[1], "file_api") == 0)
		return file_api_child();
	if (argc > 1 && strcmp(argv[1], "mallinfo") == 0)
		return mallinfo_child();
	if (argc > 1 && strcmp(argv[1], "exit_dump") == 0) {
		test_exit_dump(self);
		return test_done("malloc_stats_env exit_dump");
	}
	test_exit_dump(self);
	run_phase(self, "file_api");
	run_phase(self, "mallinfo");
	return test_done("malloc_stats_env");
}
