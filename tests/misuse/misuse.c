/* SPDX-License-Identifier: MIT */
/*
 * misuse.c - the misuse matrix: small programs that misuse the heap, each
 * run in a forked child under whatever malloc the process has (LD_PRELOAD
 * picks it), and what came of it.
 *
 *   misuse --table        one line per case: name, outcome, first stderr line
 *                         (tools/misuse-matrix runs it under each allocator)
 *   misuse --check        uslab only (preloaded): each case's outcome must be
 *                         the one expected; the ctests misuse_matrix and,
 *                         with USLAB_DEBUG=1 in the environment, the debug
 *                         mode's expectations: misuse_matrix_debug
 *   misuse --list         the cases, with what each does
 *   misuse CASE           run one case in this process (for a debugger)
 *
 * Outcomes:
 *   abort    ended by SIGABRT (with the allocator's message if it printed one)
 *   crash    ended by another signal (SIGSEGV, SIGBUS, ...)
 *   ok       the call refused a bad request as specified (NULL, EINVAL,
 *            ENOMEM, -EBUSY), or did the right thing with an edge case
 *            ("ok, errno not set": NULL, but errno is not ENOMEM)
 *   silent   the misuse went through and nothing visibly went wrong yet
 *   report   the allocator printed a message and the program went on
 *   wrong    the program saw a wrong result: one block handed out twice,
 *            an address it wrote into freed memory returned by malloc,
 *            a request that should fail succeeding
 *   hang     no end within 20 s
 *   n/a      the case needs uslab's cache API and uslab is not underneath
 *
 * In --check, a case marked known wrong (KW) has today's outcome required,
 * printed as KNOWN WRONG with what it should be; once it is what it should
 * be, the check fails and says to drop the mark, so a fix is seen. Each
 * child first ends uslab's start-up arena (a program's first blocks),
 * unless the case is about it, so the misuse meets slabs and segments as in
 * a program that has run a while.
 */
#define _GNU_SOURCE
#define USLAB_TEST_PRELOAD
#include "test.h"

#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/resource.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

/* A child's exit status for the outcomes that are not a signal. */
enum { EXIT_SILENT = 10, EXIT_OK = 11, EXIT_WRONG = 12, EXIT_NA = 13, EXIT_OK_ERRNO = 14 };

/* Through volatile pointers: the compiler must not see the misuse. */
static void (*volatile vfree)(void *) = free;
static void *(*volatile vmalloc)(size_t) = malloc;
static void *(*volatile vcalloc)(size_t, size_t) = calloc;
static void *(*volatile vrealloc)(void *, size_t) = realloc;
static void *(*volatile vreallocarray)(void *, size_t, size_t) = reallocarray;
static void *(*volatile valigned_alloc)(size_t, size_t) = aligned_alloc;
static void *(*volatile vmemalign)(size_t, size_t) = memalign;
static void *(*volatile vpvalloc)(size_t) = pvalloc;
static int (*volatile vposix_memalign)(void **, size_t, size_t) = posix_memalign;
static size_t (*volatile vusable)(void *) = malloc_usable_size;
static volatile size_t vsize_max = SIZE_MAX;

/* C23's; only some allocators have it (n/a where none does) */
extern void free_sized(void *ptr, size_t size) __attribute__((weak));

/* An address a program would rather malloc did not return. */
static char target[4096] __attribute__((aligned(4096)));

__attribute__((noreturn, format(printf, 1, 2)))
static void wrong(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "misuse: wrong: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	_exit(EXIT_WRONG);
}

static void *xmalloc(size_t n)
{
	char *p = malloc(n);

	if (!p)
		_exit(100);
	memset(p, 0x11, n);
	return p;
}

/* How many blocks a case takes after its misuse to see what came of it: a
 * freed block may wait behind others before malloc hands it out again. */
#define PROBE 256

/* After a double free of p (size n): does malloc hand one block out twice? */
static void __attribute__((noreturn)) after_double_free(void *p, size_t n)
{
	static char *got[PROBE];

	for (int i = 0; i < PROBE; i++) {
		got[i] = vmalloc(n);
		for (int k = 0; k < i; k++)
			if (got[i] && got[i] == got[k])
				wrong("freed twice, then handed out twice (%p)", (void *)got[i]);
	}
	(void)p;
	_exit(EXIT_SILENT);
}

/* After a write of target's address into freed memory: does malloc return it? */
static void __attribute__((noreturn)) after_planted(size_t n)
{
	for (int i = 0; i < PROBE; i++) {
		char *q = vmalloc(n);
		if (q && q >= target && q < target + sizeof(target))
			wrong("malloc returned the address written into a freed block (%p)", (void *)q);
	}
	_exit(EXIT_SILENT);
}

static void *foreign_page(void)
{
	void *m = mmap(NULL, 4 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED)
		_exit(101);
	return (char *)m + 4096;
}

/* ---- double frees ---------------------------------------------------------------------- */

static void df_immediate(size_t n)
{
	char *p = xmalloc(n);

	vfree(p);
	vfree(p);
	after_double_free(p, n);
}

/* free(a); free(b); free(a): the block freed twice is not the last one freed */
static void df_after_other(size_t n)
{
	char *a = xmalloc(n), *b = xmalloc(n);

	vfree(a);
	vfree(b);
	vfree(a);
	after_double_free(a, n);
}

static void case_df_small(void) { df_immediate(64); }
static void case_df_small_after_other(void) { df_after_other(64); }
static void case_df_large(void) { df_immediate(100 * KiB); }
static void case_df_large_after_other(void) { df_after_other(100 * KiB); }
static void case_df_huge(void) { df_immediate(8 * MiB); }
static void case_df_huge_after_other(void) { df_after_other(8 * MiB); }

static void case_df_small_startup(void)
{
	/* a fresh program's first blocks (uslab: the start-up arena) */
	df_immediate(64);
}

static void case_df_small_many_between(void)
{
	char *a = xmalloc(48), *keep[16];

	for (int i = 0; i < 16; i++)
		keep[i] = xmalloc(48);
	vfree(a);
	for (int i = 0; i < 16; i++)
		vfree(keep[i]);
	vfree(a);
	after_double_free(a, 48);
}

static void case_df_aligned(void)
{
	char *p = valigned_alloc(4096, 256);

	vfree(p);
	vfree(p);
	after_double_free(p, 256);
}

static void case_df_realloc_moved(void)
{
	/* realloc moved the block: freeing the old pointer is a double free */
	char *p = xmalloc(16);
	char *q = vrealloc(p, 200 * KiB);

	if (q == p)
		_exit(EXIT_SILENT);
	vfree(p);
	after_double_free(p, 16);
}

static void *alloc_and_exit(void *arg)
{
	return xmalloc((size_t)(uintptr_t)arg);
}

static void case_df_small_other_thread(void)
{
	/* allocated by a thread that has exited, freed twice by main */
	pthread_t t;
	void *p;

	if (pthread_create(&t, NULL, alloc_and_exit, (void *)(uintptr_t)96) || pthread_join(t, &p))
		_exit(102);
	vfree(p);
	vfree(p);
	after_double_free(p, 96);
}

static void *free_it(void *p)
{
	vfree(p);
	return NULL;
}

static void case_df_small_two_threads(void)
{
	/* main frees, then another thread frees the same block */
	pthread_t t;
	char *p = xmalloc(96);

	vfree(p);
	if (pthread_create(&t, NULL, free_it, p) || pthread_join(t, NULL))
		_exit(102);
	after_double_free(p, 96);
}

static void case_df_free_sized(void)
{
	if (!free_sized)
		_exit(EXIT_NA);
	char *p = xmalloc(64);

	free_sized(p, 64);
	free_sized(p, 64);
	after_double_free(p, 64);
}

/* ---- realloc of freed blocks ------------------------------------------------------------ */

static void realloc_freed(size_t n)
{
	char *p = xmalloc(n);

	vfree(p);
	char *q = vrealloc(p, n * 2);
	(void)q;
	after_double_free(p, n);
}

static void case_realloc_freed_small(void) { realloc_freed(64); }
static void case_realloc_freed_large(void) { realloc_freed(100 * KiB); }
static void case_realloc_freed_huge(void) { realloc_freed(8 * MiB); }

/* ---- invalid pointers ------------------------------------------------------------------- */

static void case_free_interior_small(void)
{
	char *p = xmalloc(64);

	vfree(p + 16);
	_exit(EXIT_SILENT);
}

static void case_free_interior_large(void)
{
	char *p = xmalloc(100 * KiB);

	vfree(p + 4096);
	_exit(EXIT_SILENT);
}

static void case_free_interior_huge(void)
{
	char *p = xmalloc(8 * MiB);

	vfree(p + 4096);
	_exit(EXIT_SILENT);
}

static void case_free_misaligned(void)
{
	char *p = xmalloc(64);

	vfree(p + 1);
	_exit(EXIT_SILENT);
}

static void case_free_stack(void)
{
	char buf[256];

	memset(buf, 1, sizeof(buf));
	vfree(buf + 64);
	_exit(EXIT_SILENT);
}

static void case_free_global(void)
{
	static char data[4096];

	vfree(data + 512);
	_exit(EXIT_SILENT);
}

static void case_free_mmap(void)
{
	vfree(foreign_page());
	_exit(EXIT_SILENT);
}

static void case_free_wild(void)
{
	vfree((void *)(uintptr_t)0x7e0000123450ull);
	_exit(EXIT_SILENT);
}

static void case_free_fake_chunk(void)
{
	/* a block-shaped fake: a 16-aligned pointer into static data that
	 * looks like a small block's header to a header-based allocator */
	static uint64_t fake[8] __attribute__((aligned(64))) = { 0, 0x51, 0, 0, 0, 0, 0, 0x21 };

	vfree(&fake[2]);
	after_planted(64);
}

static void case_realloc_interior(void)
{
	char *p = xmalloc(64);

	vrealloc(p + 8, 200);
	_exit(EXIT_SILENT);
}

static void case_realloc_stack(void)
{
	char buf[128];

	memset(buf, 1, sizeof(buf));
	vrealloc(buf + 16, 4000);
	_exit(EXIT_SILENT);
}

/* ---- malloc_usable_size of bad pointers ---------------------------------------------------- */

static void case_usable_freed(void)
{
	char *p = xmalloc(100 * KiB);

	vfree(p);
	vusable(p);
	_exit(EXIT_SILENT);
}

static void case_usable_interior(void)
{
	char *p = xmalloc(100 * KiB);

	vusable(p + 64);
	_exit(EXIT_SILENT);
}

static void case_usable_mmap(void)
{
	vusable(foreign_page());
	_exit(EXIT_SILENT);
}

static void case_usable_stack(void)
{
	char buf[64];

	memset(buf, 1, sizeof(buf));
	vusable(buf + 16);
	_exit(EXIT_SILENT);
}

/* ---- writes after free ------------------------------------------------------------------------ */

/* free(p), then write what into its first word, then allocate */
static void uaf_first_word(size_t n, uintptr_t what)
{
	char *p = xmalloc(n);

	vfree(p);
	memcpy(p, &what, sizeof(what));
	after_planted(n);
}

static void case_uaf_link_small(void) { uaf_first_word(64, (uintptr_t)target); }
static void case_uaf_link_small_garbage(void) { uaf_first_word(64, 0x4141414141414141ull); }
static void case_uaf_link_small_null(void) { uaf_first_word(64, 0); }
static void case_uaf_link_large(void) { uaf_first_word(100 * KiB, (uintptr_t)target); }

static void case_uaf_second_word(void)
{
	/* glibc's tcache key lives in the second word */
	char *p = xmalloc(64);

	vfree(p);
	memset(p + 8, 0, 8);
	vfree(p);
	after_double_free(p, 64);
}

static void case_uaf_tail_small(void)
{
	char *p = xmalloc(64);

	vfree(p);
	memset(p + 32, 0x42, 32);   /* away from any link word */
	char *q = vmalloc(64);
	if (q == p && q[40] == 0x42)
		_exit(EXIT_SILENT);   /* the write shows in the next block, unseen */
	_exit(EXIT_SILENT);
}

/* ---- overflows ---------------------------------------------------------------------------------
 * Blocks of 64 bytes until two are adjacent (the second starts where the
 * first's usable size ends, or up to 16 bytes on, past a header); with
 * none adjacent, the first two. */
static void adjacent_pair(char **a, char **b)
{
	static char *pool[256];

	for (int i = 0; i < 256; i++) {
		pool[i] = xmalloc(64);
		for (int k = 0; k < i; k++) {
			size_t u = vusable(pool[k]);
			/* right after it, or after a header of up to 16 bytes */
			if (pool[i] >= pool[k] + u && pool[i] <= pool[k] + u + 16) {
				*a = pool[k];
				*b = pool[i];
				return;
			}
		}
	}
	*a = pool[0];   /* none adjacent (red zones between): past the first one */
	*b = pool[1];
}

static void overflow_live(size_t by)
{
	char *a, *b;

	adjacent_pair(&a, &b);
	memset(a + vusable(a), 0x5a, by);
	vfree(b);
	vfree(a);
	char *c = vmalloc(64), *d = vmalloc(64);
	(void)c;
	(void)d;
	_exit(EXIT_SILENT);
}

static void case_overflow_1(void) { overflow_live(1); }
static void case_overflow_8(void) { overflow_live(8); }
static void case_overflow_64(void) { overflow_live(64); }

static void case_overflow_into_free(void)
{
	/* the neighbour is free: the overflow plants an address in it */
	char *a, *b;
	uintptr_t t = (uintptr_t)target;

	adjacent_pair(&a, &b);
	vfree(b);
	size_t u = vusable(a);
	memcpy(a + u, &t, sizeof(t));
	memcpy(a + u + 8, &t, sizeof(t));
	after_planted(64);
}

static void case_overflow_large(void)
{
	char *p = xmalloc(100 * KiB);
	size_t u = vusable(p);

	memset(p + u, 0x5a, 64);
	vfree(p);
	char *q = vmalloc(100 * KiB);
	(void)q;
	_exit(EXIT_SILENT);
}

/* ---- sizes and alignments that must be refused, and edges --------------------------------- */

static void case_malloc_size_max(void)
{
	errno = 0;
	if (vmalloc(vsize_max))
		wrong("malloc(SIZE_MAX) succeeded");
	_exit(errno == ENOMEM ? EXIT_OK : EXIT_OK_ERRNO);
}

static void case_malloc_half_space(void)
{
	errno = 0;
	if (vmalloc(vsize_max / 2 + 1))
		wrong("malloc(SIZE_MAX / 2 + 1) succeeded");
	_exit(errno == ENOMEM ? EXIT_OK : EXIT_OK_ERRNO);
}

static void case_calloc_overflow(void)
{
	errno = 0;
	if (vcalloc(vsize_max / 16 + 2, 16))
		wrong("calloc whose product overflows succeeded");
	_exit(errno == ENOMEM ? EXIT_OK : EXIT_OK_ERRNO);
}

static void case_realloc_size_max(void)
{
	char *p = xmalloc(64);

	errno = 0;
	if (vrealloc(p, vsize_max))
		wrong("realloc(p, SIZE_MAX) succeeded");
	if (p[0] != 0x11 || p[63] != 0x11)
		wrong("a failed realloc changed the block");
	vfree(p);
	_exit(errno == ENOMEM ? EXIT_OK : EXIT_OK_ERRNO);
}

static void case_reallocarray_overflow(void)
{
	errno = 0;
	if (vreallocarray(NULL, vsize_max / 8 + 2, 8))
		wrong("reallocarray whose product overflows succeeded");
	_exit(errno == ENOMEM ? EXIT_OK : EXIT_OK_ERRNO);
}

static void case_pvalloc_size_max(void)
{
	if (vpvalloc(vsize_max - 100))
		wrong("pvalloc(SIZE_MAX - 100) succeeded");
	_exit(EXIT_OK);
}

static void case_malloc_zero(void)
{
	/* a unique pointer each time, freeable */
	char *a = vmalloc(0), *b = vmalloc(0);

	if (!a || !b || a == b)
		wrong("malloc(0) gave %p and %p", (void *)a, (void *)b);
	vfree(a);
	vfree(b);
	_exit(EXIT_OK);
}

static void case_realloc_zero(void)
{
	/* glibc: frees and returns NULL; C23 leaves it to the implementation */
	char *p = xmalloc(64), *q = vrealloc(p, 0);

	vfree(q);
	_exit(EXIT_OK);
}

static void case_posix_memalign_3(void)
{
	void *p = NULL;
	int rc = vposix_memalign(&p, 3, 64);

	if (rc == 0)
		wrong("posix_memalign(alignment 3) succeeded");
	_exit(rc == EINVAL ? EXIT_OK : EXIT_SILENT);
}

static void case_posix_memalign_0(void)
{
	void *p = NULL;
	int rc = vposix_memalign(&p, 0, 64);

	if (rc == 0)
		wrong("posix_memalign(alignment 0) succeeded");
	_exit(rc == EINVAL ? EXIT_OK : EXIT_SILENT);
}

static void case_aligned_alloc_24(void)
{
	/* not a power of two: NULL and EINVAL, or rounded up to 32 (glibc) */
	errno = 0;
	char *p = valigned_alloc(24, 64);

	if (p && (uintptr_t)p % 8)
		wrong("aligned_alloc(24) returned %p", (void *)p);
	vfree(p);
	_exit(EXIT_OK);
}

static void case_memalign_huge_alignment(void)
{
	errno = 0;
	if (vmemalign((size_t)1 << 62, 64))
		wrong("memalign(2^62) succeeded");
	_exit(errno == ENOMEM || errno == EINVAL ? EXIT_OK : EXIT_OK_ERRNO);
}

static void case_aligned_alloc_zero_size(void)
{
	/* large alignment, size 0: each result a block of its own */
	void *keep[64], *zero[64];

	for (int i = 0; i < 64; i++) {
		keep[i] = valigned_alloc(65536, 4096);
		zero[i] = valigned_alloc(65536, 0);
		if (!keep[i] || !zero[i] || (uintptr_t)zero[i] % 65536)
			wrong("aligned_alloc(65536, 0) gave %p", zero[i]);
		for (int k = 0; k <= i; k++)
			if (zero[i] == keep[k])
				wrong("aligned_alloc(65536, 0) returned live block %p", zero[i]);
	}
	_exit(EXIT_OK);
}

static void case_exhaustion(void)
{
	/* ulimit -v 512 MiB: malloc fails with ENOMEM, never crashes, and works
	 * again once memory is freed */
	struct rlimit lim = { 512 * MiB, 512 * MiB };
	static void *blocks[4096];
	int n = 0;

	if (setrlimit(RLIMIT_AS, &lim))
		_exit(104);
	for (size_t size = 1 * MiB; n < 4096; n++) {
		errno = 0;
		blocks[n] = vmalloc(size);
		if (!blocks[n])
			break;
		memset(blocks[n], 1, 4096);
	}
	if (n == 4096)
		wrong("4 GiB of 1 MiB blocks under a 512 MiB limit");
	if (errno != ENOMEM)
		wrong("malloc failed with errno %d, not ENOMEM", errno);
	for (int i = 0; i < 4096; i++) {   /* small blocks now fail or succeed cleanly */
		void *p = vmalloc(64);
		if (!p)
			break;
	}
	for (int i = 0; i < n; i++)
		vfree(blocks[i]);
	if (!vmalloc(1 * MiB))
		wrong("malloc(1 MiB) still fails after everything was freed");
	_exit(EXIT_OK);
}

/* ---- the cache API (uslab only, found with dlsym) ------------------------------------------------ */

struct uslab_cache;
static struct {
	struct uslab_cache *(*create)(const char *, size_t, size_t, unsigned, void (*)(void *));
	void *(*alloc)(struct uslab_cache *);
	void (*free)(struct uslab_cache *, void *);
	void (*free_bulk)(struct uslab_cache *, size_t, void **);
	int (*destroy)(struct uslab_cache *);
} uc;

static void need_cache_api(void)
{
	*(void **)&uc.create = dlsym(RTLD_DEFAULT, "uslab_cache_create");
	*(void **)&uc.alloc = dlsym(RTLD_DEFAULT, "uslab_cache_alloc");
	*(void **)&uc.free = dlsym(RTLD_DEFAULT, "uslab_cache_free");
	*(void **)&uc.free_bulk = dlsym(RTLD_DEFAULT, "uslab_cache_free_bulk");
	*(void **)&uc.destroy = dlsym(RTLD_DEFAULT, "uslab_cache_destroy");
	if (!uc.create || !uc.alloc || !uc.free || !uc.free_bulk || !uc.destroy)
		_exit(EXIT_NA);
}

static struct uslab_cache *new_cache(const char *name, size_t size)
{
	need_cache_api();
	struct uslab_cache *c = uc.create(name, size, 0, 0, NULL);

	if (!c)
		_exit(105);
	return c;
}

static void cache_after_double_free(struct uslab_cache *c)
{
	static void *got[PROBE];

	for (int i = 0; i < PROBE; i++) {
		got[i] = uc.alloc(c);
		for (int k = 0; k < i; k++)
			if (got[i] && got[i] == got[k])
				wrong("freed twice, then handed out twice (%p)", got[i]);
	}
	_exit(EXIT_SILENT);
}

static void case_cache_df(void)
{
	struct uslab_cache *c = new_cache("misuse", 64);
	void *p = uc.alloc(c);

	uc.free(c, p);
	uc.free(c, p);
	cache_after_double_free(c);
}

static void case_cache_df_after_other(void)
{
	struct uslab_cache *c = new_cache("misuse", 64);
	void *a = uc.alloc(c), *b = uc.alloc(c);

	uc.free(c, a);
	uc.free(c, b);
	uc.free(c, a);
	cache_after_double_free(c);
}

static void case_cache_wrong_cache(void)
{
	struct uslab_cache *a = new_cache("misuse-a", 64), *b = new_cache("misuse-b", 64);
	void *p = uc.alloc(a);

	uc.free(b, p);
	_exit(EXIT_SILENT);
}

static void case_cache_free_malloc_block(void)
{
	struct uslab_cache *c = new_cache("misuse", 64);

	uc.free(c, xmalloc(64));
	_exit(EXIT_SILENT);
}

static void case_cache_free_interior(void)
{
	struct uslab_cache *c = new_cache("misuse", 64);
	char *p = uc.alloc(c);

	uc.alloc(c);   /* p is not the freelist's head */
	uc.free(c, p + 8);
	for (int i = 0; i < PROBE; i++) {
		char *q = uc.alloc(c);
		if (q == p + 8)
			wrong("uslab_cache_alloc returned a pointer inside a live object (%p)",
			      (void *)q);
	}
	_exit(EXIT_SILENT);
}

static void case_cache_bulk_duplicates(void)
{
	struct uslab_cache *c = new_cache("misuse", 64);
	void *objs[4096];

	for (int i = 0; i < 4096; i++)
		objs[i] = uc.alloc(c);
	void *twice[3] = { objs[1], objs[2], objs[1] };   /* not the active slab's */
	uc.free_bulk(c, 3, twice);
	cache_after_double_free(c);
}

static void case_cache_destroy_twice(void)
{
	struct uslab_cache *c = new_cache("misuse", 64);

	if (uc.destroy(c) != 0)
		_exit(106);
	int rc = uc.destroy(c);
	_exit(rc == -EINVAL ? EXIT_OK : EXIT_SILENT);
}

static void case_cache_destroy_live(void)
{
	struct uslab_cache *c = new_cache("misuse", 64);
	void *p = uc.alloc(c);

	int rc = uc.destroy(c);
	if (rc == 0)
		wrong("a cache with a live object was destroyed");
	uc.free(c, p);   /* the cache must still work */
	_exit(rc == -EBUSY && uc.destroy(c) == 0 ? EXIT_OK : EXIT_SILENT);
}

static void case_cache_alloc_after_destroy(void)
{
	struct uslab_cache *c = new_cache("misuse", 64);

	uc.destroy(c);
	void *p = uc.alloc(c);
	if (p)
		wrong("uslab_cache_alloc of a destroyed cache returned an object (%p)", p);
	_exit(EXIT_SILENT);
}

static void case_cache_free_after_destroy(void)
{
	struct uslab_cache *c = new_cache("misuse", 64);
	void *p = uc.alloc(c);

	uc.free(c, p);
	uc.destroy(c);
	uc.free(c, p);
	_exit(EXIT_SILENT);
}

static void case_cache_uaf_link(void)
{
	struct uslab_cache *c = new_cache("misuse", 64);
	void *p = uc.alloc(c);
	uintptr_t t = (uintptr_t)target;

	uc.free(c, p);
	memcpy(p, &t, sizeof(t));
	for (int i = 0; i < 8; i++) {
		char *q = uc.alloc(c);
		if (q >= target && q < target + sizeof(target))
			wrong("uslab_cache_alloc returned the address written into a freed "
			      "object (%p)", (void *)q);
	}
	_exit(EXIT_SILENT);
}

static void case_cache_create_bad(void)
{
	need_cache_api();
	errno = 0;
	if (uc.create("misuse", 0, 0, 0, NULL) || errno != EINVAL)
		wrong("uslab_cache_create(size 0) did not fail with EINVAL");
	if (uc.create("misuse", 64, 3, 0, NULL) || errno != EINVAL)
		wrong("uslab_cache_create(align 3) did not fail with EINVAL");
	if (uc.create("misuse", (size_t)1 << 40, 0, 0, NULL) || errno != EINVAL)
		wrong("uslab_cache_create(size 2^40) did not fail with EINVAL");
	_exit(EXIT_OK);
}

/* ---- the table ----------------------------------------------------------------------------------- */

struct misuse_case {
	const char *name;
	void (*fn)(void);
	const char *what;
	const char *expect;   /* uslab: "abort: <words of the message>", "ok", "silent" */
	const char *today;    /* known wrong: what uslab does instead, today; else NULL */
	bool startup;         /* run in a fresh program (uslab: the start-up arena) */
	const char *debug;    /* uslab with USLAB_DEBUG=1: as expect */
};

#define KW(today) today
#define DEBUG(expect) expect
static const struct misuse_case cases[] = {
	/* double frees */
	{ "df_small", case_df_small, "free(p) twice, 64 B", "abort: double free", NULL, false,
	  DEBUG("abort: double free of block") },
	{ "df_small_startup", case_df_small_startup, "free(p) twice, a fresh program's first block",
	  "abort: double free", NULL, true,
	  DEBUG("abort: double free of block") },
	{ "df_small_after_other", case_df_small_after_other, "free(a); free(b); free(a), 64 B",
	  "abort: double free", NULL, false,
	  DEBUG("abort: double free of block") },
	{ "df_small_many_between", case_df_small_many_between, "free(a), 16 other frees, free(a)",
	  "abort: double free", NULL, false,
	  DEBUG("abort: double free of block") },
	{ "df_small_other_thread", case_df_small_other_thread,
	  "free(p) twice, p from a thread that exited", "abort: double free", NULL, false,
	  DEBUG("abort: double free of block") },
	{ "df_small_two_threads", case_df_small_two_threads, "free(p) by main, then by a thread",
	  "abort: double free", NULL, false,
	  DEBUG("abort: double free of block") },
	{ "df_aligned", case_df_aligned, "free twice, aligned_alloc(4096, 256)", "abort: double free",
	  NULL, false,
	  DEBUG("abort: double free of block") },
	{ "df_free_sized", case_df_free_sized, "free_sized(p, 64) twice", "abort: double free", NULL,
	  false,
	  DEBUG("abort: double free of block") },
	{ "df_realloc_moved", case_df_realloc_moved, "free(p) after realloc moved it",
	  "abort: double free", NULL, false,
	  DEBUG("abort: double free of block") },
	{ "df_large", case_df_large, "free(p) twice, 100 KiB", "abort: double free", NULL, false,
	  DEBUG("abort: double free of block") },
	{ "df_large_after_other", case_df_large_after_other, "free(a); free(b); free(a), 100 KiB",
	  "abort: double free", NULL, false,
	  DEBUG("abort: double free of block") },
	{ "df_huge", case_df_huge, "free(p) twice, 8 MiB", "abort: double free", NULL, false,
	  DEBUG("abort: double free of block") },
	{ "df_huge_after_other", case_df_huge_after_other, "free(a); free(b); free(a), 8 MiB",
	  "abort: double free", NULL, false,
	  DEBUG("abort: double free of block") },
	/* realloc of a freed block */
	{ "realloc_freed_small", case_realloc_freed_small, "realloc(p) after free(p), 64 B",
	  "abort: double free", NULL, false,
	  DEBUG("abort: realloc of freed block") },
	{ "realloc_freed_large", case_realloc_freed_large, "realloc(p) after free(p), 100 KiB",
	  "abort: double free", NULL, false,
	  DEBUG("abort: realloc of freed block") },
	{ "realloc_freed_huge", case_realloc_freed_huge, "realloc(p) after free(p), 8 MiB",
	  "abort: double free", NULL, false,
	  DEBUG("abort: realloc of freed block") },
	/* invalid pointers */
	{ "free_interior_small", case_free_interior_small, "free(p + 16), 64 B",
	  "abort: invalid pointer", NULL, false,
	  DEBUG("abort: invalid pointer") },
	{ "free_interior_large", case_free_interior_large, "free(p + 4096), 100 KiB",
	  "abort: invalid pointer", NULL, false,
	  DEBUG("abort: invalid pointer") },
	{ "free_interior_huge", case_free_interior_huge, "free(p + 4096), 8 MiB",
	  "abort: invalid pointer", NULL, false,
	  DEBUG("abort: invalid pointer") },
	{ "free_misaligned", case_free_misaligned, "free(p + 1)", "abort: invalid pointer", NULL,
	  false,
	  DEBUG("abort: invalid pointer") },
	{ "free_stack", case_free_stack, "free of a stack address", "abort: invalid pointer", NULL,
	  false,
	  DEBUG("abort: invalid pointer") },
	{ "free_global", case_free_global, "free of a static array", "abort: invalid pointer", NULL,
	  false,
	  DEBUG("abort: invalid pointer") },
	{ "free_mmap", case_free_mmap, "free of a page from mmap", "abort: invalid pointer", NULL,
	  false,
	  DEBUG("abort: invalid pointer") },
	{ "free_wild", case_free_wild, "free of an address nobody mapped", "abort: invalid pointer",
	  NULL, false,
	  DEBUG("abort: invalid pointer") },
	{ "free_fake_chunk", case_free_fake_chunk, "free of a fake block in static data, then malloc",
	  "abort: invalid pointer", NULL, false,
	  DEBUG("abort: invalid pointer") },
	{ "realloc_interior", case_realloc_interior, "realloc(p + 8)", "abort: invalid pointer", NULL,
	  false,
	  DEBUG("abort: invalid pointer") },
	{ "realloc_stack", case_realloc_stack, "realloc of a stack address", "abort: invalid pointer",
	  NULL, false,
	  DEBUG("abort: invalid pointer") },
	/* malloc_usable_size */
	{ "usable_freed", case_usable_freed, "malloc_usable_size(p) after free(p), 100 KiB",
	  "abort: invalid pointer", NULL, false,
	  DEBUG("abort: malloc_usable_size of freed block") },
	{ "usable_interior", case_usable_interior, "malloc_usable_size(p + 64), 100 KiB",
	  "abort: invalid pointer", NULL, false,
	  DEBUG("abort: invalid pointer") },
	{ "usable_mmap", case_usable_mmap, "malloc_usable_size of a page from mmap",
	  "abort: invalid pointer", NULL, false,
	  DEBUG("abort: invalid pointer") },
	{ "usable_stack", case_usable_stack, "malloc_usable_size of a stack address",
	  "abort: invalid pointer", NULL, false,
	  DEBUG("abort: invalid pointer") },
	/* writes after free */
	{ "uaf_link_small", case_uaf_link_small,
	  "free(p); *(void **)p = &target; malloc, 64 B", "abort: corrupted free list", NULL, false,
	  DEBUG("silent") },
	{ "uaf_link_small_garbage", case_uaf_link_small_garbage,
	  "free(p); *(void **)p = 0x4141...; malloc", "abort: corrupted free list", NULL, false,
	  DEBUG("silent") },
	{ "uaf_link_small_null", case_uaf_link_small_null, "free(p); *(void **)p = NULL; malloc",
	  "abort: corrupted free list", NULL, false,
	  DEBUG("silent") },
	/* the write erases the free mark (the second word, as glibc's tcache
	 * key), so the second free is taken: two bugs, the first unseen */
	{ "uaf_second_word", case_uaf_second_word, "free(p); p[8..16) = 0; free(p)",
	  "wrong", NULL, false,
	  DEBUG("abort: double free of block") },
	{ "uaf_tail_small", case_uaf_tail_small, "free(p); write p[32..64); malloc", "abort",
	  KW("silent"), false,
	  DEBUG("silent") },
	{ "uaf_link_large", case_uaf_link_large,
	  "free(p); *(void **)p = &target; malloc, 100 KiB", "abort: corrupted free list", NULL, false,
	  DEBUG("silent") },
	/* overflows */
	{ "overflow_1", case_overflow_1, "1 byte past a block into a live neighbour", "abort",
	  KW("silent"), false,
	  DEBUG("abort: red zone of block") },
	{ "overflow_8", case_overflow_8, "8 bytes past a block into a live neighbour", "abort",
	  KW("silent"), false,
	  DEBUG("abort: red zone of block") },
	{ "overflow_64", case_overflow_64, "64 bytes past a block into a live neighbour", "abort",
	  KW("silent"), false,
	  DEBUG("abort: red zone of block") },
	{ "overflow_into_free", case_overflow_into_free,
	  "an address written past a block into its free neighbour; malloc",
	  "abort: corrupted free list", NULL, false,
	  DEBUG("silent") },
	{ "overflow_large", case_overflow_large, "64 bytes past a 100 KiB block", "silent", NULL,
	  false,
	  DEBUG("abort: red zone of block") },
	/* requests to refuse, and edges */
	{ "malloc_size_max", case_malloc_size_max, "malloc(SIZE_MAX)", "ok", NULL, false,
	  DEBUG("ok") },
	{ "malloc_half_space", case_malloc_half_space, "malloc(SIZE_MAX / 2 + 1)", "ok", NULL,
	  false,
	  DEBUG("ok") },
	{ "calloc_overflow", case_calloc_overflow, "calloc(n, m) with n * m past SIZE_MAX", "ok",
	  NULL, false,
	  DEBUG("ok") },
	{ "realloc_size_max", case_realloc_size_max, "realloc(p, SIZE_MAX): NULL, p intact", "ok",
	  NULL, false,
	  DEBUG("ok") },
	{ "reallocarray_overflow", case_reallocarray_overflow, "reallocarray(NULL, n, m) overflowing",
	  "ok", NULL, false,
	  DEBUG("ok") },
	{ "pvalloc_size_max", case_pvalloc_size_max, "pvalloc(SIZE_MAX - 100)", "ok", NULL, false,
	  DEBUG("ok") },
	{ "malloc_zero", case_malloc_zero, "malloc(0) twice: two blocks", "ok", NULL, false,
	  DEBUG("ok") },
	{ "realloc_zero", case_realloc_zero, "realloc(p, 0), then free of the result", "ok", NULL,
	  false,
	  DEBUG("ok") },
	{ "posix_memalign_3", case_posix_memalign_3, "posix_memalign(alignment 3): EINVAL", "ok",
	  NULL, false,
	  DEBUG("ok") },
	{ "posix_memalign_0", case_posix_memalign_0, "posix_memalign(alignment 0): EINVAL", "ok",
	  NULL, false,
	  DEBUG("ok") },
	{ "aligned_alloc_24", case_aligned_alloc_24, "aligned_alloc(24, 64)", "ok", NULL, false,
	  DEBUG("ok") },
	{ "memalign_2p62", case_memalign_huge_alignment, "memalign(2^62, 64)", "ok", NULL, false,
	  DEBUG("ok") },
	{ "aligned_alloc_size_0", case_aligned_alloc_zero_size,
	  "aligned_alloc(65536, 0) beside live blocks", "ok", NULL, false,
	  DEBUG("ok") },
	{ "exhaustion", case_exhaustion, "1 MiB blocks under ulimit -v 512 MiB, then free", "ok",
	  NULL, false,
	  DEBUG("ok") },
	/* the cache API */
	{ "cache_df", case_cache_df, "uslab_cache_free(c, p) twice", "abort: double free", NULL,
	  false,
	  DEBUG("abort: double free of object") },
	{ "cache_df_after_other", case_cache_df_after_other, "cache free a, b, a",
	  "abort: double free", KW("wrong"), false,
	  DEBUG("abort: double free of object") },
	{ "cache_wrong_cache", case_cache_wrong_cache, "an object freed into another cache",
	  "abort: another cache", NULL, false,
	  DEBUG("abort: another cache") },
	{ "cache_free_malloc_block", case_cache_free_malloc_block, "a malloc block freed into a cache",
	  "abort: another cache", NULL, false,
	  DEBUG("abort: another cache") },
	{ "cache_free_interior", case_cache_free_interior, "uslab_cache_free(c, p + 8)",
	  "abort: misaligned pointer", NULL, false,
	  DEBUG("abort: misaligned pointer") },
	{ "cache_bulk_duplicates", case_cache_bulk_duplicates, "free_bulk with one object twice",
	  "abort: double free", NULL, false,
	  DEBUG("abort: double free of object") },
	{ "cache_destroy_twice", case_cache_destroy_twice, "uslab_cache_destroy twice: -EINVAL", "ok",
	  NULL, false,
	  DEBUG("ok") },
	{ "cache_destroy_live", case_cache_destroy_live, "destroy with a live object: -EBUSY", "ok",
	  NULL, false,
	  DEBUG("ok") },
	{ "cache_alloc_after_destroy", case_cache_alloc_after_destroy, "alloc from a destroyed cache",
	  "abort: destroyed cache", NULL, false,
	  DEBUG("abort: destroyed cache") },
	{ "cache_free_after_destroy", case_cache_free_after_destroy, "free into a destroyed cache",
	  "abort: destroyed cache", NULL, false,
	  DEBUG("abort: destroyed cache") },
	{ "cache_uaf_link", case_cache_uaf_link, "cache object's first word written after free",
	  "abort: corrupted free list", NULL, false,
	  DEBUG("silent") },
	{ "cache_create_bad", case_cache_create_bad, "create with size 0, align 3, size 2^40", "ok",
	  NULL, false,
	  DEBUG("ok") },
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

/* ---- running a case ------------------------------------------------------------------------------ */

static void run_child(void *arg)
{
	const struct misuse_case *c = arg;

	if (!c->startup)
		test_end_startup_arena();
	c->fn();
	_exit(EXIT_SILENT);
}

struct outcome {
	char kind[32];      /* abort, crash, ok, silent, report, wrong, hang, n/a, failed */
	char line[240];     /* the first line of stderr, if any */
};

static void classify(const struct test_child *ch, struct outcome *o)
{
	const char *err = ch->err;
	size_t n = strcspn(err, "\n");

	snprintf(o->line, sizeof(o->line), "%.*s", (int)n, err);
	if (WIFSIGNALED(ch->status)) {
		int sig = WTERMSIG(ch->status);
		if (sig == SIGABRT)
			snprintf(o->kind, sizeof(o->kind), "abort");
		else if (sig == SIGALRM)
			snprintf(o->kind, sizeof(o->kind), "hang");
		else
			snprintf(o->kind, sizeof(o->kind), "crash (SIG%s)", sigabbrev_np(sig));
		return;
	}
	switch (WEXITSTATUS(ch->status)) {
	case EXIT_SILENT:
		snprintf(o->kind, sizeof(o->kind), "%s", err[0] ? "report" : "silent");
		break;
	case EXIT_OK:
		snprintf(o->kind, sizeof(o->kind), "ok");
		break;
	case EXIT_OK_ERRNO:
		snprintf(o->kind, sizeof(o->kind), "ok, errno not set");
		break;
	case EXIT_WRONG:
		snprintf(o->kind, sizeof(o->kind), "wrong");
		break;
	case EXIT_NA:
		snprintf(o->kind, sizeof(o->kind), "n/a");
		break;
	default:
		snprintf(o->kind, sizeof(o->kind), "failed (exit %d)", WEXITSTATUS(ch->status));
		break;
	}
}

static void run_case(const struct misuse_case *c, struct outcome *o)
{
	struct test_child ch;

	test_run_child(run_child, (void *)c, &ch);
	classify(&ch, o);
}

/* Does outcome o match an expectation ("abort: words", "abort", "ok", ...)? */
static bool matches(const struct outcome *o, const char *expect)
{
	if (strncmp(expect, "abort", 5) == 0) {
		if (strcmp(o->kind, "abort") != 0 || strncmp(o->line, "uslab: ", 7) != 0)
			return false;
		return expect[5] != ':' || strstr(o->line, expect + 7) != NULL;
	}
	if (strcmp(expect, "crash") == 0)
		return strncmp(o->kind, "crash", 5) == 0;
	return strcmp(o->kind, expect) == 0;
}

/* The column --check holds the cases to: the debug mode's when the
 * environment turns it on for the children (uslab reads it there too). */
static bool debug_column(void)
{
	const char *v = getenv("USLAB_DEBUG");

	return v && strcmp(v, "1") == 0;
}

static int check_all(const char *only)
{
	bool debug = debug_column();

	test_require_uslab();
	for (unsigned i = 0; i < NCASES; i++) {
		const struct misuse_case *c = &cases[i];
		const char *expect = debug ? c->debug : c->expect, *today = debug ? NULL : c->today;
		struct outcome o;

		if (only && strcmp(only, c->name))
			continue;
		run_case(c, &o);
		if (today && matches(&o, today)) {
			printf("  %-26s KNOWN WRONG: %s%s%s; should be %s\n", c->name, o.kind,
			       o.line[0] ? ": " : "", o.line, expect);
		} else if (today && matches(&o, expect)) {
			fprintf(stderr, "  %-26s FAILED: now %s (%s), as it should be: drop its "
				"known-wrong mark\n", c->name, expect, o.line);
			test_failures++;
		} else if (!today && matches(&o, expect)) {
			printf("  %-26s ok: %s%s%s\n", c->name, o.kind, o.line[0] ? ": " : "", o.line);
		} else {
			fprintf(stderr, "  %-26s FAILED: want %s, got %s%s%s\n", c->name,
				today ? today : expect, o.kind, o.line[0] ? ": " : "", o.line);
			test_failures++;
		}
		fflush(stdout);
	}
	return test_done(debug ? "misuse_matrix_debug" : "misuse_matrix");
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "--help";

	if (!strcmp(mode, "--list")) {
		for (unsigned i = 0; i < NCASES; i++)
			printf("%s\t%s\t%s\n", cases[i].name, cases[i].what, cases[i].expect);
		return 0;
	}
	if (!strcmp(mode, "--table")) {
		for (unsigned i = 0; i < NCASES; i++) {
			struct outcome o;
			run_case(&cases[i], &o);
			printf("%s\t%s\t%s\n", cases[i].name, o.kind, o.line);
			fflush(stdout);
		}
		return 0;
	}
	if (!strcmp(mode, "--check"))
		return check_all(argc > 2 ? argv[2] : NULL);
	for (unsigned i = 0; i < NCASES; i++) {
		if (!strcmp(mode, cases[i].name)) {
			run_child((void *)&cases[i]);
			return 0;
		}
	}
	fprintf(stderr, "usage: misuse --table | --check [CASE] | --list | CASE\n");
	return 2;
}
