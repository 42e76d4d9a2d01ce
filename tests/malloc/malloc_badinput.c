/* SPDX-License-Identifier: MIT */
/*
 * malloc_badinput.c - every misuse ends the process with abort() and one
 * clear line on stderr ("uslab: free(): invalid pointer 0x..."), never
 * silent corruption.
 *
 * Each case runs in a forked child with stderr on a pipe. Before the misuse
 * the child sends the pointer it is about to pass over a second pipe, so the
 * parent can check the message names exactly that pointer. The parent wants
 * WIFSIGNALED && WTERMSIG == SIGABRT and the expected line. A double free
 * must say "double free": of a small block, a large one or a huge one, from
 * slabs or from the start-up arena.
 *
 * USLAB_TEST_ALLOW_GLIBC=1 runs the cases against glibc and only reports
 * what happened (glibc detects some of these, with other messages).
 */
#define _GNU_SOURCE
#define USLAB_TEST_PRELOAD
#include "test.h"

#include <errno.h>
#include <stdbool.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

extern void free_sized(void *ptr, size_t size) __attribute__((weak));

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static int on_uslab;
static int report_fd = -1;   /* child: where to announce the bad pointer */

/* Through volatile pointers: the compiler must not see (and warn about or
 * drop) the deliberate misuse. */
static void (*volatile vfree)(void *) = free;
static void *(*volatile vrealloc)(void *, size_t) = realloc;
static size_t (*volatile vusable)(void *) = malloc_usable_size;


/* Child: tell the parent which pointer the message must name. */
static void *announce(void *p)
{
	char buf[64];
	int n = snprintf(buf, sizeof(buf), "%p", p);

	if (write(report_fd, buf, (size_t)n) != n)
		_exit(100);
	close(report_fd);
	return p;
}

static void *foreign_page(void)
{
	void *m = mmap(NULL, 4 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED)
		_exit(101);
	return (char *)m + 4096;
}

static void *checked_malloc(size_t n)
{
	char *p = malloc(n);

	if (!p)
		_exit(102);
	memset(p, 0x11, n);
	return p;
}

/* ---- the cases: each ends in the misuse; returning means it was ignored ---- */

static void case_free_stack(void)
{
	char buf[256];

	memset(buf, 0, sizeof(buf));
	vfree(announce(buf + 64));
}

static void case_free_mmap(void)
{
	vfree(announce(foreign_page()));
}

static void case_free_static(void)
{
	static char data[4096];

	vfree(announce(data + 512));
}

static void case_free_wild(void)
{
	/* never mapped by anyone: must be rejected without being touched */
	vfree(announce((void *)(uintptr_t)0x7e0000123450ull));
}

static void case_free_past_large(void)
{
	/* the unit just past a large run, free in its segment */
	char *p = checked_malloc(100 * KiB);
	size_t u = malloc_usable_size(p);

	vfree(announce(p + u + 64 * KiB));
}

static void case_free_interior_small(void)
{
	char *p = checked_malloc(64);

	vfree(announce(p + 8));
}

static void case_free_interior_small_later_unit(void)
{
	/* 2 KiB blocks: slabs of two 16 KiB units, so the 12th block of a fresh
	 * slab is in its later unit, whose descriptor malloc's free reads */
	char *p[12];

	for (unsigned i = 0; i < 12; i++)
		p[i] = checked_malloc(2100);
	vfree(announce(p[11] + 16));
}

static void case_free_interior_large(void)
{
	char *p = checked_malloc(100 * KiB);

	vfree(announce(p + 16));
}

static void case_free_interior_large_tail(void)
{
	char *p = checked_malloc(100 * KiB);

	vfree(announce(p + 40 * KiB));   /* inside a later unit of the run */
}

static void case_free_interior_huge(void)
{
	char *p = checked_malloc(8 * MiB);

	vfree(announce(p + 4096));
}

static void case_free_misaligned_small(void)
{
	char *p = checked_malloc(48);

	vfree(announce(p + 3));
}

static void case_free_misaligned_small2(void)
{
	char *p = checked_malloc(160);

	vfree(announce(p + 80));   /* 16-aligned, but mid-object */
}

static void case_free_segment_header(void)
{
	char *p = checked_malloc(64);

	/* the metadata at the start of the 4 MiB segment holding p */
	vfree(announce((void *)(((uintptr_t)p & ~((uintptr_t)(4 * MiB) - 1)) + 256)));
}

static void case_double_free_small(void)
{
	char *p = checked_malloc(64);

	vfree(p);
	vfree(announce(p));
}

static void case_double_free_small_first(void)
{
	/* the first object of a brand-new class slab */
	char *p = checked_malloc(5000);

	vfree(p);
	vfree(announce(p));
}

static pthread_barrier_t handed_over;

/* Allocates, hands the block over, and stays alive: its slab stays frozen
 * for this thread while main frees into it remotely. */
static void *alloc_and_stay(void *arg)
{
	*(void **)arg = checked_malloc(96);
	pthread_barrier_wait(&handed_over);
	for (;;)
		pause();
	return NULL;
}

static void *alloc_and_exit(void *arg)
{
	return checked_malloc((size_t)(uintptr_t)arg);
}

static void case_double_free_small_remote(void)
{
	pthread_t t;
	void *p = NULL, *keep = checked_malloc(96);   /* a heap for this thread too */

	pthread_barrier_init(&handed_over, NULL, 2);
	if (pthread_create(&t, NULL, alloc_and_stay, &p))
		_exit(103);
	pthread_barrier_wait(&handed_over);
	vfree(p);
	vfree(announce(p));
	free(keep);
}

static void case_double_free_small_orphan(void)
{
	/* the allocating thread has exited: its slab is nobody's */
	pthread_t t;
	void *p, *keep[4];

	for (int i = 0; i < 4; i++)
		keep[i] = checked_malloc(96);
	if (pthread_create(&t, NULL, alloc_and_exit, (void *)(uintptr_t)96) ||
	    pthread_join(t, &p))
		_exit(103);
	vfree(p);
	vfree(announce(p));
	for (int i = 0; i < 4; i++)
		free(keep[i]);
}

static void case_double_free_large(void)
{
	char *p = checked_malloc(100 * KiB);

	vfree(p);
	vfree(announce(p));
}

static void case_double_free_huge(void)
{
	char *p = checked_malloc(8 * MiB);

	vfree(p);
	vfree(announce(p));
}

static void case_realloc_foreign(void)
{
	vrealloc(announce(foreign_page()), 100);
}

static void case_realloc_stack(void)
{
	char buf[128];

	memset(buf, 0, sizeof(buf));
	vrealloc(announce(buf + 16), 4000);
}

static void case_realloc_interior(void)
{
	char *p = checked_malloc(64);

	vrealloc(announce(p + 8), 200);
}

static void case_usable_foreign(void)
{
	vusable(announce(foreign_page()));
}

static void case_usable_interior_large(void)
{
	char *p = checked_malloc(100 * KiB);

	vusable(announce(p + 64));
}

static void case_free_sized_foreign(void)
{
	if (!free_sized)
		abort();
	free_sized(announce(foreign_page()), 4096);
}

struct bad_case {
	const char *name;
	void (*fn)(void);
	const char *call;   /* the function the message names */
	const char *what;   /* the right wording */
};

static const struct bad_case cases[] = {
	{ "free(stack)",                  case_free_stack,               "free",   "invalid pointer" },
	{ "free(mmap page)",              case_free_mmap,                "free",   "invalid pointer" },
	{ "free(static data)",            case_free_static,              "free",   "invalid pointer" },
	{ "free(wild address)",           case_free_wild,                "free",   "invalid pointer" },
	{ "free(past a large run)",       case_free_past_large,          "free",   "invalid pointer" },
	{ "free(small + 8)",              case_free_interior_small,      "free",   "invalid pointer" },
	{ "free(small + 16, later unit)", case_free_interior_small_later_unit, "free", "invalid pointer" },
	{ "free(large + 16)",             case_free_interior_large,      "free",   "invalid pointer" },
	{ "free(large + 40 KiB)",         case_free_interior_large_tail, "free",   "invalid pointer" },
	{ "free(huge + 4096)",            case_free_interior_huge,       "free",   "invalid pointer" },
	{ "free(small + 3)",              case_free_misaligned_small,    "free",   "invalid pointer" },
	{ "free(small + 80)",             case_free_misaligned_small2,   "free",   "invalid pointer" },
	{ "free(segment header)",         case_free_segment_header,      "free",   "invalid pointer" },
	{ "double free small",            case_double_free_small,        "free",   "double free" },
	{ "double free small (new slab)", case_double_free_small_first,  "free",   "double free" },
	{ "double free small (remote)",   case_double_free_small_remote, "free",   "double free" },
	{ "double free small (orphan)",   case_double_free_small_orphan, "free",   "double free" },
	{ "double free large",            case_double_free_large,        "free",   "double free" },
	{ "double free huge",             case_double_free_huge,         "free",   "double free" },
	{ "realloc(mmap page)",           case_realloc_foreign,          "realloc", "invalid pointer" },
	{ "realloc(stack)",               case_realloc_stack,            "realloc", "invalid pointer" },
	{ "realloc(small + 8)",           case_realloc_interior,         "realloc", "invalid pointer" },
	{ "malloc_usable_size(mmap page)", case_usable_foreign,          "malloc_usable_size", "invalid pointer" },
	{ "malloc_usable_size(large + 64)", case_usable_interior_large,  "malloc_usable_size", "invalid pointer" },
	{ "free_sized(mmap page)",        case_free_sized_foreign,       "free_sized", "invalid pointer" },
};

static int count_lines_with(const char *text, const char *needle)
{
	int n = 0;

	for (const char *s = text; (s = strstr(s, needle)); s += strlen(needle))
		n++;
	return n;
}

struct run {
	const struct bad_case *c;
	bool slabs;
};

/* The child: with slabs, it first ends the start-up arena, so the misuse
 * meets slabs and segments; else its blocks come from the arena (a fresh
 * program's first blocks). */
static void run_child(void *arg)
{
	const struct run *r = arg;

	if (r->slabs)
		test_end_startup_arena();
	r->c->fn();
}

/* Run one case; returns 1 if it behaved as wanted. */
static int run_case(const struct bad_case *c, bool slabs)
{
	struct run r = { c, slabs };
	struct test_child child;
	int reppipe[2];
	char ptr[64], how[64];

	REQUIRE(pipe(reppipe) == 0);
	report_fd = reppipe[1];
	test_run_child(run_child, &r, &child);
	close(reppipe[1]);
	ssize_t n = read(reppipe[0], ptr, sizeof(ptr) - 1);
	ptr[n > 0 ? n : 0] = 0;
	close(reppipe[0]);

	const char *outcome = test_child_outcome(&child, how, sizeof(how));
	char *err = child.err;
	size_t el = strlen(err);
	if (el + 2 > sizeof(child.err))   /* room for the newline added below */
		err[el = sizeof(child.err) - 2] = 0;
	while (el && err[el - 1] == '\n')   /* trimmed for the report */
		err[--el] = 0;

	if (!on_uslab) {
		printf("  %-32s %s; stderr: \"%s\" (glibc: informational)\n", c->name, outcome,
		       err);
		return 1;
	}

	int ok = 1;
	const char *why = "";
	char want[160];
	snprintf(want, sizeof(want), "uslab: %s(): %s %s\n", c->call, c->what, ptr);
	err[el] = '\n';   /* match whole lines */
	err[el + 1] = 0;
	if (!WIFSIGNALED(child.status) || WTERMSIG(child.status) != SIGABRT) {
		ok = 0;
		why = "not ended by SIGABRT";
	} else if (!ptr[0]) {
		ok = 0;
		why = "child did not announce its pointer";
	} else if (!test_has_line(err, want)) {
		ok = 0;
		why = "expected message missing";
	} else if (count_lines_with(err, "uslab:") != 1) {
		ok = 0;
		why = "not exactly one uslab: line";
	}
	err[el] = 0;
	if (ok) {
		printf("  %-6s %-32s ok: %s\n", slabs ? "slabs" : "arena", c->name, err);
	} else {
		fprintf(stderr, "  %-6s %-32s FAILED (%s): %s; want \"%.*s\"; stderr: \"%s\"\n",
			slabs ? "slabs" : "arena", c->name, why, outcome, (int)strlen(want) - 1,
			want, err);
		test_failures++;
	}
	return ok;
}

int main(int argc, char **argv)
{
	on_uslab = test_require_uslab();
	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (argc > 1 && !strstr(cases[i].name, argv[1]))
			continue;
		run_case(&cases[i], false);
		run_case(&cases[i], true);
		fflush(stdout);
	}
	return test_done("malloc_badinput");
}
