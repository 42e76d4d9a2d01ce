/* SPDX-License-Identifier: MIT */
/*
 * fuzz_malloc - the malloc family against a shadow model.
 *
 * The input is a sequence of operations on 64 slots: malloc, calloc,
 * realloc, reallocarray, free, free_sized, free_aligned_sized,
 * aligned_alloc, posix_memalign, memalign, valloc, pvalloc,
 * malloc_usable_size, a free or an allocation on a helper thread (remote
 * frees both ways), trim, a thread flush and a whole-heap validation.
 * Sizes cover every kind (small, large, huge, the start-up arena's first
 * blocks) and the edges between them, 0, and requests that must fail.
 *
 * The model holds each live block's pointer, requested size, alignment,
 * usable size and pattern seed. Checked after every operation:
 *   - a request that must fail (size overflow, a bad alignment) fails with
 *     the errno or result glibc gives; every other one succeeds;
 *   - alignment; malloc_usable_size >= the request, unchanged while live;
 *   - no two live blocks overlap (over their usable sizes);
 *   - contents: every block holds its pattern until freed; calloc's are
 *     zero; realloc keeps the prefix;
 *   - at the end of an input, with every block freed, every malloc cache
 *     and every segment's descriptors validate.
 */
#define _GNU_SOURCE
#include "fuzz.h"
#include "kmalloc_check.h"
#include "uslab.h"

#include <errno.h>

#define SLOTS 64
#define LIVE_BYTES_MAX (96 * MiB)   /* keep a run's memory bounded */

struct block {
	uint8_t *p;
	size_t size;    /* requested */
	size_t align;   /* asked for (1 = none) */
	size_t usable;
	uint64_t seed;
};

static struct block slots[SLOTS];
static size_t live_bytes;
static uint64_t seed_counter;

/* ---- sizes ------------------------------------------------------------------------------- */

/* The edges: the class table's ends, the large and huge limits, the arena's
 * largest block and the page size. */
static const size_t edge_sizes[] = {
	0, 1, 7, 8, 9, 15, 16, 17, 128, 129, 1024, 1025, 1152, 1153, 4095, 4096, 4097,
	16383, 16384, 16385, 32767, 32768, 32769, 65536, 65537, 2 * MiB - 1, 2 * MiB,
	2 * MiB + 1, 4 * MiB,
};

static size_t pick_size(struct fuzz_in *in)
{
	uint8_t kind = in_u8(in);
	uint32_t r = in_u32(in);

	if (kind < 150)
		return r % 257;
	if (kind < 215)
		return r % (32 * KiB + 1);
	if (kind < 240)   /* large: 32 KiB up to 2 MiB, smaller ones more often */
		return 32 * KiB + r % ((32 * KiB << (kind % 7)) - 32 * KiB + 1);
	if (kind < 246)
		return 2 * MiB + r % (6 * MiB);
	return edge_sizes[r % (sizeof(edge_sizes) / sizeof(edge_sizes[0]))];
}

/* A request that cannot be met: more than the address space allows. */
static size_t pick_impossible(struct fuzz_in *in)
{
	static const size_t sizes[] = { SIZE_MAX, SIZE_MAX - 4095, SIZE_MAX / 2 + 1, PTRDIFF_MAX,
					(size_t)1 << 62, (size_t)1 << 48 };

	return sizes[in_u8(in) % (sizeof(sizes) / sizeof(sizes[0]))];
}

/* Alignments: powers of two from 1 to 4 MiB, and now and then not one. */
static size_t pick_align(struct fuzz_in *in, bool *pow2)
{
	uint8_t b = in_u8(in);
	size_t a = (size_t)1 << (b % 23);

	*pow2 = true;
	if (b >= 230) {   /* a few odd ones: 0, 3, 24, 48 KiB + 8 */
		static const size_t odd[] = { 0, 3, 24, 48 * KiB + 8, 100, 4097 };
		a = odd[b % 6];
		*pow2 = false;
	}
	return a;
}

static size_t pow2_ceil(size_t a)
{
	return a <= 1 ? 1 : (size_t)1 << (64 - __builtin_clzl(a - 1));
}

/* ---- the model ------------------------------------------------------------------------- */

FUZZ_NO_COVERAGE
static void check_no_overlap(unsigned self)
{
	const struct block *b = &slots[self];

	for (unsigned i = 0; i < SLOTS; i++) {
		const struct block *o = &slots[i];
		if (i == self || !o->p)
			continue;
		if (b->p < o->p + o->usable && o->p < b->p + b->usable)
			fuzz_fail("block %p (%zu usable) overlaps live block %p (%zu usable, slot %u)",
				  (void *)b->p, b->usable, (void *)o->p, o->usable, i);
	}
}

/* A new block in slot s (empty): check what can be checked, then fill it. */
static void took(unsigned s, void *p, size_t size, size_t align, bool zeroed, const char *how)
{
	struct block *b = &slots[s];

	FUZZ_CHECK(p != NULL, "%s(%zu, align %zu) returned NULL (errno %d)", how, size, align,
		   errno);
	FUZZ_CHECK((uintptr_t)p % align == 0, "%s(%zu, align %zu) returned %p, misaligned", how,
		   size, align, p);
	size_t usable = uslab_malloc_usable_size(p);
	FUZZ_CHECK(usable >= size, "%s(%zu): usable size %zu of %p is less", how, size, usable, p);
	if (zeroed) {
		size_t n = size < 256 * KiB ? size : 256 * KiB;   /* a huge calloc: its head */
		FUZZ_CHECK(all_zero(p, n), "%s(%zu): block %p not zeroed", how, size, p);
	}
	*b = (struct block){ p, size, align, usable, ++seed_counter };
	check_no_overlap(s);
	pattern_fill(p, size, b->seed);
	live_bytes += size;
}

static void check_intact(const struct block *b, const char *before)
{
	size_t bad = pattern_check(b->p, b->size, b->size, b->seed);

	FUZZ_CHECK(bad == b->size,
		   "block %p (%zu bytes): byte %zu changed while live (seen before %s)",
		   (void *)b->p, b->size, bad, before);
}

/* Check slot s's block before it goes, and forget it. */
static void *giving_up(unsigned s, const char *how)
{
	struct block *b = &slots[s];
	void *p = b->p;

	check_intact(b, how);
	size_t usable = uslab_malloc_usable_size(p);
	FUZZ_CHECK(usable == b->usable, "usable size of %p went from %zu to %zu while live", p,
		   b->usable, usable);
	live_bytes -= b->size;
	memset(b, 0, sizeof(*b));
	return p;
}

/* ---- the helper thread's operations ------------------------------------------------------ */

struct remote_op {
	void *p;
	size_t size;
};

static void remote_free(void *arg)
{
	uslab_free(((struct remote_op *)arg)->p);
}

static void remote_malloc(void *arg)
{
	struct remote_op *op = arg;

	op->p = uslab_malloc(op->size);
}

static void remote_flush(void *arg)
{
	(void)arg;
	uslab_thread_flush();
}

/* ---- operations -------------------------------------------------------------------------- */

enum op {
	OP_MALLOC, OP_CALLOC, OP_REALLOC, OP_REALLOCARRAY, OP_FREE, OP_FREE_SIZED,
	OP_FREE_ALIGNED_SIZED, OP_ALIGNED_ALLOC, OP_POSIX_MEMALIGN, OP_MEMALIGN, OP_VALLOC,
	OP_PVALLOC, OP_USABLE, OP_REMOTE_FREE, OP_REMOTE_MALLOC, OP_IMPOSSIBLE, OP_TRIM,
	OP_FLUSH, OP_VALIDATE, OP_COUNT
};

/* Would a block of size fit the run's memory budget? */
static bool affordable(size_t size)
{
	return size <= 8 * MiB + 1 && live_bytes + size <= LIVE_BYTES_MAX;
}

static void check_fails(void *p, const char *how, size_t a, size_t b)
{
	FUZZ_CHECK(p == NULL, "%s(%zu, %zu) should fail, returned %p", how, a, b, p);
	FUZZ_CHECK(errno == ENOMEM || errno == EINVAL, "%s(%zu, %zu) failed with errno %d", how,
		   a, b, errno);
}

static void do_realloc(unsigned s, size_t size, bool array, struct fuzz_in *in)
{
	struct block *b = &slots[s];

	if (!b->p) {
		void *p = array ? uslab_reallocarray(NULL, 1, size) : uslab_realloc(NULL, size);
		took(s, p, size, size >= 16 ? 16 : 8, false, "realloc(NULL)");
		return;
	}
	if (size == 0 && !array) {   /* frees, and returns NULL */
		void *old = giving_up(s, "realloc(p, 0)");
		FUZZ_CHECK(uslab_realloc(old, 0) == NULL, "realloc(%p, 0) did not return NULL", old);
		return;
	}
	if (!affordable(size) && size > b->size)
		return;
	check_intact(b, "realloc");
	struct block old = *b;
	void *q;
	if (array) {
		size_t m = 1 + in_u8(in) % 16, n = size / m;   /* n * m <= size */
		size = n * m;
		q = uslab_reallocarray(b->p, n, m);
	} else {
		q = uslab_realloc(b->p, size);
	}
	if (size == 0 && q == NULL) {   /* reallocarray(p, 0, m): a realloc to 0 */
		live_bytes -= b->size;
		memset(b, 0, sizeof(*b));
		return;
	}
	FUZZ_CHECK(q != NULL, "realloc(%p, %zu) returned NULL", (void *)old.p, size);
	size_t keep = old.size < size ? old.size : size;
	size_t bad = pattern_check(q, keep, old.size, old.seed);
	FUZZ_CHECK(bad == keep, "realloc(%p, %zu) -> %p: byte %zu of the kept %zu changed",
		   (void *)old.p, size, q, bad, keep);
	live_bytes -= old.size;
	memset(b, 0, sizeof(*b));
	took(s, q, size, size >= 16 ? 16 : 8, false, "realloc");
}

static void op_alloc_aligned(enum op op, unsigned s, size_t size, struct fuzz_in *in)
{
	bool pow2;
	size_t align = pick_align(in, &pow2);
	void *p = NULL;

	if (!affordable(size + (align > 64 * KiB ? align : 0)))
		return;
	switch (op) {
	case OP_ALIGNED_ALLOC:
		/* C11 wants a power of two; uslab, as glibc, rounds others up */
		p = uslab_aligned_alloc(align, size);
		break;
	case OP_MEMALIGN:
		p = uslab_memalign(align, size);
		break;
	default: {
		int rc = uslab_posix_memalign(&p, align, size);
		if (!pow2 || align < sizeof(void *)) {
			FUZZ_CHECK(rc == EINVAL, "posix_memalign(align %zu) returned %d, not EINVAL",
				   align, rc);
			return;
		}
		FUZZ_CHECK(rc == 0, "posix_memalign(align %zu, %zu) returned %d", align, size, rc);
		break;
	}
	}
	took(s, p, size, pow2_ceil(align), false,
	     op == OP_ALIGNED_ALLOC ? "aligned_alloc" : op == OP_MEMALIGN ? "memalign" :
	     "posix_memalign");
}

static void op_impossible(struct fuzz_in *in)
{
	size_t n = pick_impossible(in), small = 1 + in_u8(in);
	void *p, *keep;

	errno = 0;
	switch (in_u8(in) % 6) {
	case 0:
		check_fails(uslab_malloc(n), "malloc", n, 0);
		break;
	case 1:   /* n * small overflows, or is past the address space */
		check_fails(uslab_calloc(n, small + 1), "calloc", n, small + 1);
		break;
	case 2:
		check_fails(uslab_aligned_alloc(64, n), "aligned_alloc", 64, n);
		break;
	case 3:
		FUZZ_CHECK(uslab_posix_memalign(&p, 4096, n) == ENOMEM,
			   "posix_memalign(4096, %zu) did not return ENOMEM", n);
		break;
	case 4:
		check_fails(uslab_reallocarray(NULL, n, small + 1), "reallocarray", n, small + 1);
		break;
	default:   /* a failed realloc leaves the block as it was */
		keep = uslab_malloc(small);
		FUZZ_CHECK(keep != NULL, "malloc(%zu) returned NULL", small);
		pattern_fill(keep, small, 7);
		check_fails(uslab_realloc(keep, n), "realloc", small, n);
		FUZZ_CHECK(pattern_check(keep, small, small, 7) == small,
			   "a failed realloc changed its block");
		uslab_free(keep);
		break;
	}
}

/* An operation byte: the common calls often, the whole-heap ones (trim,
 * flush, validate: each costs a walk or page faults after it) rarely. */
static enum op pick_op(struct fuzz_in *in)
{
	uint8_t b = in_u8(in);

	if (b < 248)
		return (enum op)(b % OP_TRIM);
	return (enum op)(OP_TRIM + b % (OP_COUNT - OP_TRIM));
}

static void step(struct fuzz_in *in)
{
	enum op op = pick_op(in);
	unsigned s = in_u8(in) % SLOTS;
	struct block *b = &slots[s];

	switch (op) {
	case OP_MALLOC:
	case OP_CALLOC:
	case OP_VALLOC:
	case OP_PVALLOC:
	case OP_ALIGNED_ALLOC:
	case OP_POSIX_MEMALIGN:
	case OP_MEMALIGN:
	case OP_REMOTE_MALLOC: {
		if (b->p)   /* the slot's block goes first */
			uslab_free(giving_up(s, "free"));
		size_t size = pick_size(in);
		if (!affordable(size))
			return;
		if (op == OP_MALLOC) {
			took(s, uslab_malloc(size), size, size >= 16 ? 16 : 8, false, "malloc");
		} else if (op == OP_CALLOC) {
			size_t m = 1 + in_u8(in) % 8;
			size_t n = size / m;
			took(s, uslab_calloc(n, m), n * m, 8, true, "calloc");
		} else if (op == OP_VALLOC) {
			took(s, uslab_valloc(size), size, 4096, false, "valloc");
		} else if (op == OP_PVALLOC) {
			took(s, uslab_pvalloc(size), size, 4096, false, "pvalloc");
			FUZZ_CHECK(slots[s].usable >= ((size + 4095) & ~(size_t)4095),
				   "pvalloc(%zu): usable %zu is less than whole pages", size,
				   slots[s].usable);
		} else if (op == OP_REMOTE_MALLOC) {
			struct remote_op r = { NULL, size };
			helper_run(remote_malloc, &r);
			took(s, r.p, size, size >= 16 ? 16 : 8, false, "malloc (helper thread)");
		} else {
			op_alloc_aligned(op, s, size, in);
		}
		break;
	}
	case OP_REALLOC:
	case OP_REALLOCARRAY:
		do_realloc(s, pick_size(in), op == OP_REALLOCARRAY, in);
		break;
	case OP_FREE:
		if (b->p)
			uslab_free(giving_up(s, "free"));
		else
			uslab_free(NULL);
		break;
	case OP_FREE_SIZED:
		if (b->p) {
			size_t n = b->size;
			uslab_free_sized(giving_up(s, "free_sized"), n);
		}
		break;
	case OP_FREE_ALIGNED_SIZED:
		if (b->p) {
			size_t n = b->size, a = b->align;
			uslab_free_aligned_sized(giving_up(s, "free_aligned_sized"), a, n);
		}
		break;
	case OP_USABLE:
		if (b->p) {
			size_t u = uslab_malloc_usable_size(b->p);
			FUZZ_CHECK(u == b->usable, "malloc_usable_size(%p) went from %zu to %zu",
				   (void *)b->p, b->usable, u);
		} else {
			FUZZ_CHECK(uslab_malloc_usable_size(NULL) == 0,
				   "malloc_usable_size(NULL) is not 0");
		}
		break;
	case OP_REMOTE_FREE:
		if (b->p) {
			struct remote_op r = { giving_up(s, "a free on the helper thread"), 0 };
			helper_run(remote_free, &r);
			if (in_u8(in) & 1)
				helper_run(remote_flush, NULL);
		}
		break;
	case OP_IMPOSSIBLE:
		op_impossible(in);
		break;
	case OP_TRIM:
		uslab_trim();
		break;
	case OP_FLUSH:
		uslab_thread_flush();
		break;
	case OP_VALIDATE:
		FUZZ_CHECK(kmalloc_validate_all() == 0, "validation found problems (above)");
		break;
	case OP_COUNT:
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };

	fuzz_name = "fuzz_malloc";
	while (in.n)
		step(&in);
	for (unsigned s = 0; s < SLOTS; s++)
		if (slots[s].p)
			uslab_free(giving_up(s, "the end of the input"));
	FUZZ_CHECK(live_bytes == 0, "the model lost count: %zu bytes live", live_bytes);
	uslab_thread_flush();
	if (helper.started)
		helper_run(remote_flush, NULL);
	FUZZ_CHECK(kmalloc_validate_all() == 0, "validation found problems (above)");
	return 0;
}
