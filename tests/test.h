/* SPDX-License-Identifier: MIT */
/*
 * test.h - the tiny harness every test program uses. A test is a program: it
 * exits 0 when every check held, 1 after printing what broke, and
 * TEST_SKIP_CODE (77, CTest's SKIP_RETURN_CODE for every test) when all it
 * ran held but something it is meant to check could not be checked here
 * (test_skip said what, on a line of its own).
 *
 *   CHECK, CHECK_EQ, REQUIRE        checks; REQUIRE ends the test at once
 *   test_skip, test_done            a check not run here; main's last word
 *   test_now, test_sleep_ms, test_stress_seconds, test_rand
 *   test_fill, test_intact, ...     a block's pattern, from its address and
 *                                   size (or a seed that travels with it)
 *   test_run_child, test_expect_abort, test_expect_abort_known_wrong
 *                                   code run in a forked child
 *   test_open_doc                   a file of docs/, for tests that hold it
 *                                   to the code
 *   test_status_kb, test_vma_of, test_thp_mode   what the kernel says
 *   test_require_uslab, test_end_startup_arena   drop-in (preloaded) tests,
 *                                   with USLAB_TEST_PRELOAD defined first
 */
#ifndef USLAB_TEST_H
#define USLAB_TEST_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- checks and the verdict ---------------------------------------------------------------- */

#define TEST_SKIP_CODE 77

static int test_failures;
static int test_skips;
static char test_skip_first[160];

#define CHECK(cond)                                                             \
	do {                                                                    \
		if (!(cond)) {                                                  \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__,  \
				__LINE__, #cond);                               \
			test_failures++;                                        \
		}                                                               \
	} while (0)

#define CHECK_EQ(a, b)                                                          \
	do {                                                                    \
		long long _a = (long long)(a), _b = (long long)(b);             \
		if (_a != _b) {                                                 \
			fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %lld, %s == %lld\n", \
				__FILE__, __LINE__, #a, _a, #b, _b);            \
			test_failures++;                                        \
		}                                                               \
	} while (0)

/* Abort the whole test at once (for checks inside worker threads). */
#define REQUIRE(cond)                                                           \
	do {                                                                    \
		if (!(cond)) {                                                  \
			fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, \
				__LINE__, #cond);                               \
			exit(1);                                                \
		}                                                               \
	} while (0)

/* A check this machine or build cannot run: say why; the test then ends
 * skipped, not passed, unless another check failed. */
__attribute__((format(printf, 1, 2)))
static inline void test_skip(const char *fmt, ...)
{
	char why[sizeof(test_skip_first)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (!test_skips++)
		memcpy(test_skip_first, why, sizeof(why));
	printf("SKIP: %s\n", why);
	fflush(stdout);
}

static inline int test_done(const char *name)
{
	if (test_failures) {
		fprintf(stderr, "%s: %d check(s) failed\n", name, test_failures);
		return 1;
	}
	if (test_skips) {
		printf("%s: skipped (%s%s)\n", name, test_skip_first,
		       test_skips > 1 ? ", and more" : "");
		return TEST_SKIP_CODE;
	}
	printf("%s: ok\n", name);
	return 0;
}

/* ---- time and randomness --------------------------------------------------------------------- */

static inline double test_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Sleeps the whole of ms, through signals. */
static inline void test_sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) != 0)
		;
}

/* Stress duration in seconds: USLAB_STRESS_SECONDS overrides the default. */
static inline double test_stress_seconds(double dflt)
{
	const char *s = getenv("USLAB_STRESS_SECONDS");

	return s ? atof(s) : dflt;
}

/* Deterministic per-thread PRNG (xorshift64*). */
static inline uint64_t test_rand(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1Dull;
}

/* ---- block patterns ---------------------------------------------------------------------------
 *
 * A block of n bytes filled with a seed holds, at byte i, byte i % 8 (the
 * least significant first) of test_pattern_word(seed, i / 8): any prefix of
 * it can be checked, after realloc too. test_fill and test_intact take the seed
 * from the block's address and size, so a block handed out twice, written
 * through a stale pointer or moved shows; a block realloc may move keeps
 * the seed it was filled with (test_fill_seed, test_intact_seed).
 *
 * TEST_FILL_SPARSE, for stress tests that must keep the allocator the
 * bottleneck: blocks over 4 KiB get their first and last 512 bytes and one
 * word in every 128 bytes between.
 */
enum test_fill_how { TEST_FILL_ALL, TEST_FILL_SPARSE };

static inline uint64_t test_pattern_word(uint64_t seed, size_t w)
{
	return (seed ^ (w * 0x9E3779B97F4A7C15ull)) * 0xD6E8FEB86659FD93ull;
}

static inline uint64_t test_block_seed(const void *p, size_t n)
{
	return (uint64_t)(uintptr_t)p * 0x100000001B3ull ^ n;
}

/* Is word w written when a block of n bytes is filled so? */
static inline bool test_word_filled(size_t w, size_t n, enum test_fill_how how)
{
	return how == TEST_FILL_ALL || n <= 4096 || w < 64 || w + 64 >= n / 8 || w % 16 == 0;
}

/* The pattern's word as it lies in memory (byte i % 8 at offset i % 8). */
static inline uint64_t test_pattern_stored(uint64_t seed, size_t w)
{
	uint64_t v = test_pattern_word(seed, w);

#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	v = __builtin_bswap64(v);
#endif
	return v;
}

static inline void test_fill_with(void *p, size_t n, uint64_t seed, enum test_fill_how how)
{
	unsigned char *b = (unsigned char *)p;
	size_t nw = n / 8;

	for (size_t w = 0; w < nw; w++) {
		if (test_word_filled(w, n, how)) {
			uint64_t v = test_pattern_stored(seed, w);
			memcpy(b + 8 * w, &v, 8);
		}
	}
	if (n % 8 && test_word_filled(nw, n, how)) {
		uint64_t last = test_pattern_word(seed, nw);
		for (size_t i = nw * 8; i < n; i++)
			b[i] = (unsigned char)(last >> (8 * (i % 8)));
	}
}

/* The first len bytes of a block that test_fill_with(p, n, seed, how) filled
 * (len <= n; realloc may have moved or cut it): the offset of the first byte
 * that differs, or len if none does. */
static inline size_t test_check_with(const void *p, size_t len, size_t n, uint64_t seed,
				     enum test_fill_how how)
{
	const unsigned char *b = (const unsigned char *)p;
	size_t nw = len / 8;

	for (size_t w = 0; w < nw; w++) {
		uint64_t v = test_pattern_stored(seed, w), got;
		if (!test_word_filled(w, n, how))
			continue;
		memcpy(&got, b + 8 * w, 8);
		if (got != v)
			for (size_t i = 8 * w;; i++)
				if (b[i] != (unsigned char)(test_pattern_word(seed, w) >> (8 * (i % 8))))
					return i;
	}
	if (len % 8 && test_word_filled(nw, n, how)) {
		uint64_t last = test_pattern_word(seed, nw);
		for (size_t i = nw * 8; i < len; i++)
			if (b[i] != (unsigned char)(last >> (8 * (i % 8))))
				return i;
	}
	return len;
}

static inline void test_fill_seed(void *p, size_t n, uint64_t seed)
{
	test_fill_with(p, n, seed, TEST_FILL_ALL);
}

/* The offset of the first of p's first n bytes that differs from a fill of
 * n or more bytes with seed, or n. */
static inline size_t test_first_bad_seed(const void *p, size_t n, uint64_t seed)
{
	return test_check_with(p, n, n, seed, TEST_FILL_ALL);
}

static inline bool test_intact_seed(const void *p, size_t n, uint64_t seed)
{
	return test_first_bad_seed(p, n, seed) == n;
}

static inline void test_fill(void *p, size_t n)
{
	test_fill_seed(p, n, test_block_seed(p, n));
}

/* The offset of the first byte of p's n that test_fill(p, n) did not leave
 * as it was, or n. */
static inline size_t test_first_bad(const void *p, size_t n)
{
	return test_check_with(p, n, n, test_block_seed(p, n), TEST_FILL_ALL);
}

static inline bool test_intact(const void *p, size_t n)
{
	return test_first_bad(p, n) == n;
}

static inline bool test_all_zero(const void *p, size_t n)
{
	const unsigned char *b = (const unsigned char *)p;

	for (size_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

/* ---- children -----------------------------------------------------------------------------------
 *
 * test_run_child runs fn(arg) in a forked child with its stderr captured,
 * no core file and 20 s to end (SIGALRM then); the child exits 0 if fn
 * returns. Call it where the process has one thread.
 */
struct test_child {
	int status;          /* as waitpid gives it */
	char err[4096];      /* the child's stderr (cut at 4 KiB), NUL-terminated */
};

/* A child case that runs this long (seconds) hangs: longer under the
 * sanitizers, which run the threaded cases 5 to 15 times slower, and
 * slower still on a machine another suite loads. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define TEST_CHILD_ALARM 60
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define TEST_CHILD_ALARM 60
#endif
#endif
#ifndef TEST_CHILD_ALARM
#define TEST_CHILD_ALARM 20
#endif

static inline void test_run_child(void (*fn)(void *), void *arg, struct test_child *c)
{
	int fd[2];
	size_t len = 0;

	REQUIRE(pipe(fd) == 0);
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		struct rlimit no_core = { 0, 0 };

		setrlimit(RLIMIT_CORE, &no_core);
		alarm(TEST_CHILD_ALARM);
		close(fd[0]);
		dup2(fd[1], 2);
		close(fd[1]);
		fn(arg);
		_exit(0);
	}
	close(fd[1]);
	for (;;) {
		char tmp[512];
		ssize_t n = read(fd[0], tmp, sizeof(tmp));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		for (ssize_t i = 0; i < n && len + 1 < sizeof(c->err); i++)
			c->err[len++] = tmp[i];
	}
	c->err[len] = 0;
	close(fd[0]);
	REQUIRE(waitpid(pid, &c->status, 0) == pid);
}

/* "killed by signal 6 (Aborted)", "exited 0". */
static inline const char *test_child_outcome(const struct test_child *c, char *buf, size_t size)
{
	if (WIFSIGNALED(c->status))
		snprintf(buf, size, "killed by signal %d (%s)", WTERMSIG(c->status),
			 strsignal(WTERMSIG(c->status)));
	else
		snprintf(buf, size, "exited %d", WEXITSTATUS(c->status));
	return buf;
}

/* Does a line of text begin with want? (End want with "\n" to match a
 * whole line.) */
static inline bool test_has_line(const char *text, const char *want)
{
	size_t n = strlen(want);

	for (const char *s = text;; s++) {
		if (!strncmp(s, want, n))
			return true;
		s = strchr(s, '\n');
		if (!s)
			return false;
	}
}

static inline bool test_aborted_with(const struct test_child *c, const char *want)
{
	return WIFSIGNALED(c->status) && WTERMSIG(c->status) == SIGABRT &&
	       test_has_line(c->err, want);
}

static inline void test_child_failed(const struct test_child *c, const char *want)
{
	char how[64];

	fprintf(stderr, "expected SIGABRT and a line \"%.*s\" on stderr; the child %s, "
			"stderr: \"%s\"\n", (int)strcspn(want, "\n"), want,
		test_child_outcome(c, how, sizeof(how)), c->err);
	test_failures++;
}

/* fn(arg) in a child must end in SIGABRT with a line on stderr that begins
 * with want; otherwise say what happened and count a failure. */
static inline bool test_expect_abort(void (*fn)(void *), void *arg, const char *want)
{
	struct test_child c;

	test_run_child(fn, arg, &c);
	if (test_aborted_with(&c, want))
		return true;
	test_child_failed(&c, want);
	return false;
}

/*
 * The same for a misuse whose message is known to be wrong: right is what
 * it should say, today what it says. Today's message is required (so that
 * no other change goes unseen) and printed as KNOWN WRONG; once the right
 * one appears instead, the check fails and says to expect it from then on.
 */
static inline bool test_expect_abort_known_wrong(void (*fn)(void *), void *arg,
						 const char *right, const char *today)
{
	struct test_child c;

	test_run_child(fn, arg, &c);
	if (test_aborted_with(&c, today)) {
		printf("KNOWN WRONG: says \"%.*s\" where it should say \"%.*s\"\n",
		       (int)strcspn(today, "\n"), today, (int)strcspn(right, "\n"), right);
		return true;
	}
	if (test_aborted_with(&c, right)) {
		fprintf(stderr, "now says the right \"%.*s\", no longer \"%.*s\": expect it "
				"with test_expect_abort\n", (int)strcspn(right, "\n"), right,
			(int)strcspn(today, "\n"), today);
		test_failures++;
		return false;
	}
	test_child_failed(&c, today);
	return false;
}

/* ---- files ------------------------------------------------------------------------------- */

/* The whole file at path as a NUL-terminated string (free it), or NULL if
 * it cannot be opened; a short read ends the string where it stopped. */
static inline char *test_read_file(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = (char *)malloc((size_t)n + 1);   /* the cast: C++ tests include this too */
	REQUIRE(buf);
	buf[fread(buf, 1, (size_t)n, f)] = 0;
	fclose(f);
	return buf;
}

/* ---- the source tree ---------------------------------------------------------------------- */

/* docs/<name> of the source tree, found from this header's own path (tests
 * run in the build tree); NULL, counted as a failure, if it cannot be
 * opened: why says what the file is needed for. */
static inline FILE *test_open_doc(const char *name, const char *why)
{
	char path[4096];
	const char *slash = strrchr(__FILE__, '/');
	FILE *f;

	snprintf(path, sizeof(path), "%.*s/../docs/%s", slash ? (int)(slash - __FILE__) : 1,
		 slash ? __FILE__ : ".", name);
	f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "cannot open %s (%s)\n", path, why);
		test_failures++;
	}
	return f;
}

/* ---- what the kernel says -------------------------------------------------------------------- */

/* A field of /proc/self/status in KiB ("VmRSS", "VmHWM"), or -1. Reads with
 * open and read: it does not allocate, so a test can watch an idle
 * allocator. */
static inline long test_status_kb(const char *field)
{
	char buf[8192], key[64];
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	snprintf(key, sizeof(key), "\n%s:", field);
	const char *p = strstr(buf, key);
	return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

/* The kernel's transparent-huge-page mode. With none at all it refuses
 * MADV_HUGEPAGE and VmFlags never show "hg" or "nh"; with "never" marks are
 * kept but no huge page is given; with "always" any anonymous mapping may
 * get one. */
enum test_thp { TEST_THP_NONE = -1, TEST_THP_NEVER, TEST_THP_MADVISE, TEST_THP_ALWAYS };

static inline enum test_thp test_thp_mode(void)
{
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
	char buf[128] = "";

	if (!f)
		return TEST_THP_NONE;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = 0;
	fclose(f);
	if (strstr(buf, "[always]"))
		return TEST_THP_ALWAYS;
	if (strstr(buf, "[madvise]"))
		return TEST_THP_MADVISE;
	return TEST_THP_NEVER;
}

/* The mapping (VMA) that holds p, from /proc/self/smaps: its bounds,
 * whether it is executable, its resident KiB (Rss), its
 * transparent-huge-page flags (VmFlags "hg" = MADV_HUGEPAGE, "nh" =
 * MADV_NOHUGEPAGE), THPeligible and AnonHugePages (KiB). False if no
 * mapping holds p. Reads the file with stdio: call it where stdio may
 * allocate. */
struct test_vma {
	uintptr_t start, end;
	int exec, hg, nh, dd, thp_eligible;
	long rss_kb, anon_huge_kb;
};

static inline int test_vma_of(const void *p, struct test_vma *v)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	int in = 0, found = 0;

	memset(v, 0, sizeof(*v));
	v->thp_eligible = -1;
	v->anon_huge_kb = -1;
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char perms[8];

		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3) {   /* a mapping's line */
			if (found)
				break;
			in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
			if (in) {
				found = 1;
				v->start = lo;
				v->end = hi;
				v->exec = perms[2] == 'x';
			}
			continue;
		}
		if (!in)
			continue;
		if (!strncmp(line, "Rss:", 4))
			v->rss_kb = atol(line + 4);
		else if (!strncmp(line, "THPeligible:", 12))
			v->thp_eligible = atoi(line + 12);
		else if (!strncmp(line, "AnonHugePages:", 14))
			v->anon_huge_kb = atol(line + 14);
		else if (!strncmp(line, "VmFlags:", 8)) {
			v->hg = strstr(line, " hg") != NULL;
			v->nh = strstr(line, " nh") != NULL;
			v->dd = strstr(line, " dd") != NULL;
		}
	}
	fclose(f);
	return found;
}

/* ---- drop-in tests (USLAB_TEST_PRELOAD) ------------------------------------------------------ */

#ifdef USLAB_TEST_PRELOAD
#include <dlfcn.h>
/*
 * Drop-in tests must really run on uslab: fail loudly if the preload is
 * missing. USLAB_TEST_ALLOW_GLIBC=1 lets a test run on glibc instead (to check
 * the test itself); the result says whether uslab is underneath, so checks of
 * uslab-only behaviour can be left out there - and the test then ends
 * skipped, not passed.
 */
static inline int test_require_uslab(void)
{
	const char *g = getenv("USLAB_TEST_ALLOW_GLIBC");
	int on = dlsym(RTLD_DEFAULT, "uslab_malloc") != NULL;

	if (g && *g && strcmp(g, "0")) {
		if (!on)
			test_skip("running on glibc (USLAB_TEST_ALLOW_GLIBC): uslab's own checks left out");
		return on;
	}
	if (!on) {
		fprintf(stderr, "this test must run with LD_PRELOAD=libuslab-malloc.so\n");
		exit(1);
	}
	return 1;
}

/* Preloaded tests: end uslab's start-up arena (a program's first small
 * blocks, packed outside any slab; allocator/malloc/arena.c), so that what follows
 * is served by slabs, heaps and segments. It ends after 16,384 blocks. */
static inline void test_end_startup_arena(void)
{
	for (int i = 0; i < 20000; i++) {
		void *volatile p = malloc(64);
		free(p);
	}
}
#endif /* USLAB_TEST_PRELOAD */

#endif /* USLAB_TEST_H */
