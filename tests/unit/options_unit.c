/* SPDX-License-Identifier: MIT */
/*
 * options_unit - parsing of the USLAB_* environment (allocator/platform/options.c).
 *
 *   good      every accepted spelling of every type sets the value, silently
 *   bad       negative, garbage, overflow, empty, missing '=': one warning
 *             line on stderr, the default kept
 *   unknown   a USLAB_ name that is not an option: one warning line
 *   tools     USLAB_LIB=, USLAB_TEST_*, USLAB_STRESS_*, USLAB_BENCH_*: silent
 *   environ   options_init() in a fresh process (this program re-executed)
 *             reads the environment, warns once per bad entry, allocates
 *             nothing
 *   docs      docs/options.md lists every option of the X-macro, exactly,
 *             with its type, default and meaning (test_open_doc)
 */
#define _GNU_SOURCE
#include "test.h"
#include "options.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the X-macro, as the test sees it -------------------------------------------- */

static const struct {
	const char *env, *type, *dflt_text, *doc;
	long dflt;
} opts[OPT_COUNT] = {
#define X(id, env, type, dflt, doc) [OPT_##id] = { env, #type, #dflt, doc, (long)(dflt) },
	USLAB_OPTIONS(X)
#undef X
};

/* ---- stderr capture ------------------------------------------------------------------ */

static int saved_stderr = -1;
static FILE *capture_file;

static void capture_begin(void)
{
	fflush(stderr);
	capture_file = tmpfile();
	REQUIRE(capture_file);
	saved_stderr = dup(2);
	REQUIRE(saved_stderr >= 0);
	REQUIRE(dup2(fileno(capture_file), 2) == 2);
}

/* Restore stderr; what was written meanwhile goes to buf (NUL-terminated). */
static void capture_end(char *buf, size_t size)
{
	size_t n;

	fflush(stderr);
	REQUIRE(dup2(saved_stderr, 2) == 2);
	close(saved_stderr);
	rewind(capture_file);
	n = fread(buf, 1, size - 1, capture_file);
	buf[n] = 0;
	fclose(capture_file);
}

static int count_lines(const char *s)
{
	int n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* Parse one entry from the defaults; returns the number of stderr lines and
 * leaves the text in out. */
static int parse(const char *entry, char *out, size_t size)
{
	options_reset();
	capture_begin();
	options_parse_entry(entry);
	capture_end(out, size);
	return count_lines(out);
}

static int find_option(const char *env)
{
	for (int i = 0; i < OPT_COUNT; i++)
		if (strcmp(opts[i].env, env) == 0)
			return i;
	return -1;
}

/* ---- good values ------------------------------------------------------------------------ */

static void expect_good(const char *entry, enum option_id id, long want)
{
	char err[1024];
	int lines = parse(entry, err, sizeof(err));

	if (lines != 0 || option(id) != want) {
		fprintf(stderr, "good value '%s': got %ld (want %ld), stderr: %s\n", entry,
			option(id), want, lines ? err : "(empty)");
		test_failures++;
	}
}

static void test_good_values(void)
{
	/* BOOL: both defaults exist (STATS 0, DWCAS 1), so each spelling moves a value */
	static const char *const yes[] = { "1", "yes", "on", "true", "TRUE", "Yes", "ON" };
	static const char *const no[] = { "0", "no", "off", "false", "FALSE", "No", "Off" };
	char entry[128];

	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		snprintf(entry, sizeof(entry), "USLAB_STATS=%s", yes[i]);
		expect_good(entry, OPT_STATS, 1);
		snprintf(entry, sizeof(entry), "USLAB_DWCAS=%s", no[i]);
		expect_good(entry, OPT_DWCAS, 0);
	}

	/* INT */
	expect_good("USLAB_DECAY_MS=0", OPT_DECAY_MS, 0);
	expect_good("USLAB_DECAY_MS=250", OPT_DECAY_MS, 250);
	expect_good("USLAB_DECAY_MS=2147483647", OPT_DECAY_MS, 2147483647);   /* INT_MAX: the top */
	expect_good("USLAB_DECAY_MS=86400000", OPT_DECAY_MS, 86400000);
	expect_good("USLAB_RESERVE_SEGMENTS=0", OPT_RESERVE_SEGMENTS, 0);
	expect_good("USLAB_RESERVE_SEGMENTS=7", OPT_RESERVE_SEGMENTS, 7);
	expect_good("USLAB_CPU_PARTIAL=3", OPT_CPU_PARTIAL, 3);

	/* SIZE, with and without suffixes */
	expect_good("USLAB_DIRTY_MAX=0", OPT_DIRTY_MAX, 0);
	expect_good("USLAB_DIRTY_MAX=4096", OPT_DIRTY_MAX, 4096);
	expect_good("USLAB_DIRTY_MAX=16k", OPT_DIRTY_MAX, 16l << 10);
	expect_good("USLAB_DIRTY_MAX=16K", OPT_DIRTY_MAX, 16l << 10);
	expect_good("USLAB_DIRTY_MAX=3m", OPT_DIRTY_MAX, 3l << 20);
	expect_good("USLAB_DIRTY_MAX=3M", OPT_DIRTY_MAX, 3l << 20);
	expect_good("USLAB_DIRTY_MAX=2g", OPT_DIRTY_MAX, 2l << 30);
	expect_good("USLAB_DIRTY_MAX=1024G", OPT_DIRTY_MAX, 1024l << 30);

	/* SIGNAL: by name, with or without SIG, and by number */
	expect_good("USLAB_STATS_SIGNAL=USR2", OPT_STATS_SIGNAL, SIGUSR2);
	expect_good("USLAB_STATS_SIGNAL=SIGUSR2", OPT_STATS_SIGNAL, SIGUSR2);
	expect_good("USLAB_STATS_SIGNAL=USR1", OPT_STATS_SIGNAL, SIGUSR1);
	expect_good("USLAB_STATS_SIGNAL=SIGHUP", OPT_STATS_SIGNAL, SIGHUP);
	expect_good("USLAB_STATS_SIGNAL=PROF", OPT_STATS_SIGNAL, SIGPROF);
	expect_good("USLAB_STATS_SIGNAL=WINCH", OPT_STATS_SIGNAL, SIGWINCH);
	expect_good("USLAB_STATS_SIGNAL=URG", OPT_STATS_SIGNAL, SIGURG);
	snprintf(entry, sizeof(entry), "USLAB_STATS_SIGNAL=%d", SIGUSR2);
	expect_good(entry, OPT_STATS_SIGNAL, SIGUSR2);
	snprintf(entry, sizeof(entry), "USLAB_STATS_SIGNAL=%d", SIGRTMIN + 1);
	expect_good(entry, OPT_STATS_SIGNAL, SIGRTMIN + 1);

	/* STR: kept as a pointer into the entry itself, nothing copied */
	static const char path_entry[] = "USLAB_STATS_FILE=/tmp/uslab stats.json";
	expect_good(path_entry, OPT_STATS_FILE, 0);
	CHECK(option_str(OPT_STATS_FILE) == path_entry + strlen("USLAB_STATS_FILE="));
	options_reset();
	CHECK(option_str(OPT_STATS_FILE) == NULL);

	/* a later entry overrides an earlier one */
	options_reset();
	options_parse_entry("USLAB_DECAY_MS=10");
	options_parse_entry("USLAB_DECAY_MS=20");
	CHECK_EQ(option(OPT_DECAY_MS), 20);
	options_reset();
}

/* ---- bad values -------------------------------------------------------------------------- */

static void expect_bad(const char *entry)
{
	char err[1024], name[64];
	size_t len = strcspn(entry, "=");
	int lines, id;

	snprintf(name, sizeof(name), "%.*s", (int)len, entry);
	id = find_option(name);
	REQUIRE(id >= 0);
	lines = parse(entry, err, sizeof(err));
	bool one_warning = lines == 1 && strncmp(err, "uslab: warning:", 15) == 0 &&
			   strstr(err, entry) != NULL;
	bool kept = option((enum option_id)id) == opts[id].dflt &&
		    option_str((enum option_id)id) == NULL;

	if (!one_warning || !kept) {
		fprintf(stderr, "bad value '%s' %s%s%s: value %ld (default %ld), stderr %s", entry,
			one_warning ? "" : "gave no single warning line",
			one_warning || kept ? "" : " and ", kept ? "" : "was accepted",
			option((enum option_id)id), opts[id].dflt, *err ? err : "empty\n");
		test_failures++;
	}
}

static void test_bad_values(void)
{
	/* missing '=' and empty values, for every type */
	for (int i = 0; i < OPT_COUNT; i++) {
		char entry[128];

		expect_bad(opts[i].env);
		snprintf(entry, sizeof(entry), "%s=", opts[i].env);
		expect_bad(entry);
	}

	/* BOOL */
	expect_bad("USLAB_STATS=2");
	expect_bad("USLAB_STATS=maybe");
	expect_bad("USLAB_STATS=-1");
	expect_bad("USLAB_STATS=1 ");
	expect_bad("USLAB_DWCAS=YES ");

	/* INT: negative, garbage, trailing junk, a suffix (not a SIZE), overflow */
	expect_bad("USLAB_DECAY_MS=-1");
	expect_bad("USLAB_DECAY_MS=-0");
	expect_bad("USLAB_DECAY_MS=soon");
	expect_bad("USLAB_DECAY_MS=12x");
	expect_bad("USLAB_DECAY_MS=1.5");
	expect_bad("USLAB_DECAY_MS=10k");
	expect_bad("USLAB_DECAY_MS=0x10");
	expect_bad("USLAB_DECAY_MS= -5");   /* strtol skips the blank, then a minus */
	expect_bad("USLAB_DECAY_MS=9223372036854775808");    /* LONG_MAX + 1 */
	expect_bad("USLAB_DECAY_MS=99999999999999999999999");
	expect_bad("USLAB_RESERVE_SEGMENTS=-3");
	expect_bad("USLAB_CPU_PARTIAL=lots");
	/* above INT_MAX: the layers read INT options as int or unsigned, where
	 * 4294967296 would become 0 */
	expect_bad("USLAB_CPU_PARTIAL=4294967296");
	expect_bad("USLAB_RESERVE_SEGMENTS=2147483648");

	/* SIZE: a suffix alone, two suffixes, unknown suffix, negative, overflow */
	expect_bad("USLAB_DIRTY_MAX=-1");
	expect_bad("USLAB_DIRTY_MAX=-8m");
	expect_bad("USLAB_DIRTY_MAX=k");
	expect_bad("USLAB_DIRTY_MAX=m");
	expect_bad("USLAB_DIRTY_MAX=8mb");
	expect_bad("USLAB_DIRTY_MAX=8km");
	expect_bad("USLAB_DIRTY_MAX=8t");
	expect_bad("USLAB_DIRTY_MAX=8 m");
	expect_bad("USLAB_DIRTY_MAX=lots");
	expect_bad("USLAB_DIRTY_MAX=9999999999g");            /* overflows with the suffix */
	expect_bad("USLAB_DIRTY_MAX=99999999999999999999999"); /* overflows strtol itself */

	/* SIGNAL: unknown names, zero, negative, out of range, lower case */
	expect_bad("USLAB_STATS_SIGNAL=FOO");
	expect_bad("USLAB_STATS_SIGNAL=SIG");
	expect_bad("USLAB_STATS_SIGNAL=usr2");
	expect_bad("USLAB_STATS_SIGNAL=0");
	expect_bad("USLAB_STATS_SIGNAL=-12");
	expect_bad("USLAB_STATS_SIGNAL=100000");
	expect_bad("USLAB_STATS_SIGNAL=99999999999999999999999");
	expect_bad("USLAB_STATS_SIGNAL=USR2x");
	/* signals the program cannot give up: faults, KILL, STOP, INT, by name
	 * or number (a SEGV taken over turned a crash into an endless loop) */
	expect_bad("USLAB_STATS_SIGNAL=SEGV");
	expect_bad("USLAB_STATS_SIGNAL=KILL");
	static const int unsafe[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGKILL, SIGSTOP, SIGINT,
				      SIGTERM, SIGABRT, SIGCHLD, SIGPIPE, SIGALRM };
	for (size_t i = 0; i < sizeof(unsafe) / sizeof(unsafe[0]); i++) {
		char entry[64];

		snprintf(entry, sizeof(entry), "USLAB_STATS_SIGNAL=%d", unsafe[i]);
		expect_bad(entry);
	}
}

/* ---- unknown names, tool variables ---------------------------------------------------------- */

static void test_unknown_and_tools(void)
{
	static const char *const unknown[] = {
		"USLAB_FOO=1", "USLAB_STAT=1", "USLAB_STATSX=1", "USLAB_stats=1", "USLAB_=1",
		"USLAB_LIBX=/x", "USLAB_TEST=1", "USLAB_DECAY_MS_X=5", "USLAB_BOGUS",
	};
	static const char *const tools[] = {
		"USLAB_LIB=/opt/uslab/libuslab.so", "USLAB_LIB=", "USLAB_TEST_ALLOW_GLIBC=1",
		"USLAB_TEST_ANYTHING=garbage", "USLAB_STRESS_SECONDS=3", "USLAB_STRESS_X=",
		"USLAB_BENCH_FILTER=BM_malloc", "USLAB_BENCH_",
	};
	char err[1024];

	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
		int lines = parse(unknown[i], err, sizeof(err));

		if (lines != 1 || strncmp(err, "uslab: warning:", 15) || !strstr(err, unknown[i])) {
			fprintf(stderr, "unknown '%s': want one warning line naming it, got: %s\n",
				unknown[i], *err ? err : "(empty)\n");
			test_failures++;
		}
		for (int k = 0; k < OPT_COUNT; k++)
			CHECK(option((enum option_id)k) == opts[k].dflt);
	}
	for (size_t i = 0; i < sizeof(tools) / sizeof(tools[0]); i++) {
		int lines = parse(tools[i], err, sizeof(err));

		if (lines != 0) {
			fprintf(stderr, "tool variable '%s' must be silent, got: %s", tools[i], err);
			test_failures++;
		}
		for (int k = 0; k < OPT_COUNT; k++)
			CHECK(option((enum option_id)k) == opts[k].dflt);
	}
	options_reset();
}

/* ---- the real environment, in a fresh process ------------------------------------------------- */

/*
 * Count the allocations options_init() makes (it must make none). Only
 * where no sanitizer owns malloc: the test binary's malloc then replaces
 * glibc's for the whole process and forwards to glibc's own entry points.
 */
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define COUNT_MALLOC 1
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
static volatile int counting, counted;

void *malloc(size_t n);
void *calloc(size_t n, size_t m);
void *realloc(void *p, size_t n);

void *malloc(size_t n)
{
	counted += counting;
	return __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
	counted += counting;
	return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
	counted += counting;
	return __libc_realloc(p, n);
}
#endif

static int child_main(void)
{
	/* The library's constructor has read the environment already (and
	 * warned): forget it, and count the allocations of a second read, which
	 * does the same work (its warnings, once per process, stay silent). */
	int allocs = -1;

	options_forget();
#ifdef COUNT_MALLOC
	bool fresh = option(OPT_DECAY_MS) == opts[OPT_DECAY_MS].dflt;

	counting = 1;
	options_init();
	counting = 0;
	allocs = fresh ? counted : -1;
	/* the counter itself works: one malloc counts one */
	counting = 1;
	free(malloc(24));
	counting = 0;
	if (counted != (allocs < 0 ? 0 : allocs) + 1 && fresh)
		allocs = -3;
#else
	options_init();
#endif
	options_init();   /* idempotent: no second round of warnings */
	printf("decay_ms=%ld dirty_max=%ld stats=%ld signal=%ld file=%s reserve=%ld allocs=%d\n",
	       option(OPT_DECAY_MS), option(OPT_DIRTY_MAX), option(OPT_STATS),
	       option(OPT_STATS_SIGNAL), option_str(OPT_STATS_FILE) ? option_str(OPT_STATS_FILE) : "-",
	       option(OPT_RESERVE_SEGMENTS), allocs);
	/* _exit: no exit-time statistics from the library, only what init said */
	fflush(stdout);
	_exit(0);
}

/* Run this program again as `self --child` with env; collect stdout and stderr. */
static int run_child(char *const env[], char *out, size_t out_size, char *err, size_t err_size)
{
	FILE *fo = tmpfile(), *fe = tmpfile();
	int status;
	pid_t pid;
	size_t n;

	REQUIRE(fo && fe);
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		char *const argv[] = { "options_unit", "--child", NULL };

		dup2(fileno(fo), 1);
		dup2(fileno(fe), 2);
		execve("/proc/self/exe", argv, env);
		_exit(127);
	}
	REQUIRE(waitpid(pid, &status, 0) == pid);
	rewind(fo);
	rewind(fe);
	n = fread(out, 1, out_size - 1, fo);
	out[n] = 0;
	n = fread(err, 1, err_size - 1, fe);
	err[n] = 0;
	fclose(fo);
	fclose(fe);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void test_environment(void)
{
	char *const env[] = {
		"USLAB_DECAY_MS=123",
		"USLAB_DIRTY_MAX=2m",
		"USLAB_STATS_FILE=/nonexistent/dir/stats.json",
		"USLAB_RESERVE_SEGMENTS=-1",       /* bad: default kept */
		"USLAB_FOO=1",                     /* unknown */
		"USLAB_LIB=/some/libuslab.so",     /* tool variables: silent */
		"USLAB_TEST_ALLOW_GLIBC=1",
		"USLAB_STRESS_SECONDS=1",
		"USLAB_BENCH_X=1",
		"NOT_USLAB_DECAY_MS=5",            /* not ours at all */
		"USLAB_STATS_SIGNAL=SIGUSR1",
		NULL,
	};
	char out[1024], err[4096], want[256];
	int before = test_failures;
	int rc = run_child(env, out, sizeof(out), err, sizeof(err));

	CHECK_EQ(rc, 0);
	snprintf(want, sizeof(want),
		 "decay_ms=123 dirty_max=%ld stats=0 signal=%d file=/nonexistent/dir/stats.json "
		 "reserve=%ld allocs=",
		 2l << 20, SIGUSR1, opts[OPT_RESERVE_SEGMENTS].dflt);
	if (strncmp(out, want, strlen(want)) != 0) {
		fprintf(stderr, "child read the environment wrongly:\n  got  %s  want %s...\n", out,
			want);
		test_failures++;
	}
	const char *a = strstr(out, "allocs=");
	int allocs = a ? atoi(a + 7) : -2;
	if (allocs > 0) {
		fprintf(stderr, "options_init() allocated %d time(s); it must allocate nothing\n",
			allocs);
		test_failures++;
	} else if (allocs == -3) {
		fprintf(stderr, "the malloc counter of this test does not count\n");
		test_failures++;
	} else if (allocs < 0) {
		test_skip("options_init()'s allocations are not counted in this build (a "
			  "sanitizer owns malloc, or the library read the environment first)");
	}
	/* exactly two warnings, one per offending entry, in environment order */
	CHECK_EQ(count_lines(err), 2);
	CHECK(strstr(err, "uslab: warning: bad value in 'USLAB_RESERVE_SEGMENTS=-1' ignored: "
			  "expected a whole number from 0 to 2147483647; using 1\n") == err);
	CHECK(strstr(err, "uslab: warning: unknown option 'USLAB_FOO=1' ignored (docs/options.md "
			  "lists them)\n") != NULL);
	if (test_failures != before)
		fprintf(stderr, "child stdout:\n%schild stderr:\n%s", out, err);
}

/* ---- docs/options.md against the X-macro -------------------------------------------------------- */

static char *trim(char *s)
{
	char *e;

	while (*s == ' ')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\n'))
		*--e = 0;
	return s;
}

/* Strip one pair of surrounding backticks. */
static char *unquote(char *s)
{
	size_t n = strlen(s);

	if (n >= 2 && s[0] == '`' && s[n - 1] == '`') {
		s[n - 1] = 0;
		return s + 1;
	}
	return s;
}

static void check_doc_row(int id, char *type, char *dflt, char *meaning)
{
	char entry[256], err[512];

	if (strcmp(type, opts[id].type) != 0) {
		fprintf(stderr, "docs/options.md: %s has type '%s', options.h says %s\n",
			opts[id].env, type, opts[id].type);
		test_failures++;
	}
	if (!strstr(meaning, opts[id].doc)) {
		fprintf(stderr, "docs/options.md: %s: the meaning must contain options.h's text\n"
				"  \"%s\"\n  found \"%s\"\n", opts[id].env, opts[id].doc, meaning);
		test_failures++;
	}
	/* The default is written as a value the parser accepts (so it reads as
	 * what a user would type), or "(unset)"/"(none)" for a zero default. */
	if (strcmp(dflt, "(unset)") == 0 || strcmp(dflt, "(none)") == 0) {
		if (opts[id].dflt != 0) {
			fprintf(stderr, "docs/options.md: %s default %s, options.h says %s\n",
				opts[id].env, dflt, opts[id].dflt_text);
			test_failures++;
		}
		return;
	}
	snprintf(entry, sizeof(entry), "%s=%s", opts[id].env, unquote(dflt));
	if (parse(entry, err, sizeof(err)) != 0 ||
	    option((enum option_id)id) != opts[id].dflt) {
		fprintf(stderr, "docs/options.md: %s default '%s' does not parse to options.h's "
				"%s (= %ld)\n", opts[id].env, dflt, opts[id].dflt_text, opts[id].dflt);
		test_failures++;
	}
}

static void test_docs(void)
{
	char line[1024];
	int seen[OPT_COUNT] = { 0 };
	FILE *f = test_open_doc("options.md", "it must list every option");

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *cell[6] = { 0 }, *p = line;
		int n = 0;

		if (strncmp(line, "| `USLAB_", 9) != 0)
			continue;
		/* | `NAME` | TYPE | DEFAULT | MEANING | */
		p++;
		while (n < 6 && (cell[n] = strsep(&p, "|")) != NULL)
			n++;
		if (n < 4) {
			fprintf(stderr, "docs/options.md: malformed row: %s", line);
			test_failures++;
			continue;
		}
		char *name = unquote(trim(cell[0]));
		int id = find_option(name);
		if (id < 0) {
			fprintf(stderr, "docs/options.md lists %s, which options.h does not have\n",
				name);
			test_failures++;
			continue;
		}
		if (seen[id]++) {
			fprintf(stderr, "docs/options.md lists %s twice\n", name);
			test_failures++;
		}
		check_doc_row(id, trim(cell[1]), trim(cell[2]), trim(cell[3]));
	}
	fclose(f);
	for (int i = 0; i < OPT_COUNT; i++) {
		if (!seen[i]) {
			fprintf(stderr, "docs/options.md does not list %s (type %s, default %s): "
					"add a row \"| `%s` | %s | ... | %s |\"\n",
				opts[i].env, opts[i].type, opts[i].dflt_text, opts[i].env,
				opts[i].type, opts[i].doc);
			test_failures++;
		}
	}
	options_reset();
}

/* ---- USLAB_VERBOSE's report -------------------------------------------------------- */

struct report {
	char text[4096];
	size_t len;
	int lines;
};

static void report_line(const char *line, void *arg)
{
	struct report *r = arg;

	r->len += (size_t)snprintf(r->text + r->len, sizeof(r->text) - r->len, "%s\n", line);
	r->lines++;
}

static void test_report(void)
{
	struct report r = { .len = 0 };

	options_reset();
	options_parse_entry("USLAB_DECAY_MS=250");
	options_parse_entry("USLAB_STATS_FILE=/tmp/x.json");
	options_report(report_line, &r);
	CHECK_EQ(r.lines, OPT_COUNT);   /* every option, once */
	CHECK(strstr(r.text, "USLAB_DECAY_MS=250 (environment)\n") != NULL);
	CHECK(strstr(r.text, "USLAB_STATS_FILE=/tmp/x.json (environment)\n") != NULL);
	CHECK(strstr(r.text, "USLAB_STATS=0 (default)\n") != NULL);
	CHECK(strstr(r.text, "USLAB_DIRTY_PERCENT=300 (default)\n") != NULL);
	options_reset();   /* back to the defaults: nothing from the environment */
	r.len = 0;
	r.lines = 0;
	options_report(report_line, &r);
	CHECK(strstr(r.text, "USLAB_DECAY_MS=500 (default)\n") != NULL);
	CHECK(strstr(r.text, "(environment)") == NULL);
	if (test_failures)
		fprintf(stderr, "report:\n%s", r.text);
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "--child") == 0)
		return child_main();

	test_report();

	test_good_values();
	test_bad_values();
	test_unknown_and_tools();
	test_environment();
	test_docs();
	return test_done("options_unit");
}
