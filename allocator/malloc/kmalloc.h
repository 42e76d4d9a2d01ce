/* SPDX-License-Identifier: MIT */
/*
 * kmalloc.h - the malloc layer: size classes over static caches, large and
 * huge blocks, the start-up arena, and the inline malloc/free fast paths.
 *
 * Three block kinds, all found from a pointer by one lookup:
 *   small  <= SMALL_MAX       an object of one of NR_CLASSES static caches
 *   large  <= LARGE_MAX       a run of 16 KiB units inside a segment (from
 *                             LARGE_MIN up for realloc's growth and calloc;
 *                             at an aligned unit for alignments above 16 KiB)
 *   huge   >  LARGE_MAX       its own mapping, tracked in the huge table
 *                             (also: alignment > LARGE_ALIGN_MAX beyond
 *                             small sizes)
 *
 * Classes: 16, 32, 48, 64, 80, 96, 112, 128, then four per doubling
 * (160, 192, 224, 256, 320, ...) up to 64 KiB and every 8 KiB from there
 * to 128 KiB, plus 2^k + 2^k/8 for 1 KiB <= 2^k <= 16 KiB (1152, 2304, ...
 * 18432: a power of two and a small header, 4104 say, would waste 20-25 %
 * of the next class): 57 classes, at most 25 % internal waste above 128
 * bytes. The classes above 32 KiB keep a block's pages where blocks of its
 * size were before (a run cut from free units would not), and their 8 KiB
 * steps bound the pages a slot's blocks of different sizes touch in time
 * (docs/large.md, "Mid-size blocks"). Every class is a multiple of 16,
 * so every block is aligned to 16 (max_align_t, as glibc's), and every
 * object has a second word: a freed block keeps the double-free mark there
 * (kfree). No 8-byte class: glibc spends 32 bytes on malloc(8).
 */
#ifndef USLAB_KMALLOC_H
#define USLAB_KMALLOC_H

#include "cache.h"

_Static_assert(sizeof(struct cpu_slab) == 1 << 6, "CPU_SLAB_SHIFT");

#pragma GCC visibility push(hidden)

#define SMALL_MAX   (128u << 10)
#define LARGE_MAX   (2ul << 20)
/* the smallest large run: a block realloc grows past this (kmalloc.c,
 * small_to_run) or calloc asks for above it (api/malloc.c) is one, though
 * a class would hold it - a run can grow in place, and knows when its
 * pages are fresh, so calloc need not write them */
#define LARGE_MIN (32u << 10)
/* the largest alignment a large run takes (at an aligned unit: segment.h,
 * segment_alloc_units_aligned); above it a block is huge */
#define LARGE_ALIGN_MAX (256u << 10)
#define NR_CLASSES  57
_Static_assert(NR_CLASSES <= NEVER_USED_ID, "the never-used cpu slab is no class's");

/*
 * The static caches, stored start-up classes first (the power-of-two ones,
 * 16 B ... 128 KiB, in size order; then the others): a short-lived program
 * uses mostly those, so their setup writes, and a fork's lock and unlock of
 * their list_locks copies, one or two pages rather than five.
 * kmalloc_slot[class] is a class's place, kmalloc_slot_class[] the inverse.
 */
#define NR_STARTUP_CLASSES 14

/* The static caches and the word of which are set up (layout.c). */
struct kmalloc_statics {
	/* bit k: store[k] is set up (set with release under the init lock,
	 * after cache_setup). One word, so asking whether a class is ready
	 * does not touch the class's own lines: a start-up redirect of a
	 * class never set up leaves its page of store unread. */
	uint64_t ready;
	struct uslab_cache store[NR_CLASSES] __attribute__((aligned(CACHE_LINE)));
};
_Static_assert(NR_CLASSES <= 64, "ready is one word");
extern struct kmalloc_statics kmalloc_statics;
#define kmalloc_store (kmalloc_statics.store)
extern const uint8_t kmalloc_slot[NR_CLASSES];
extern const uint8_t kmalloc_slot_class[NR_CLASSES];

static inline struct uslab_cache *kmalloc_cache(unsigned cls)
{
	return &kmalloc_store[kmalloc_slot[cls]];
}

static inline unsigned kmalloc_class_of(const struct uslab_cache *s)
{
	return kmalloc_slot_class[s - kmalloc_store];
}

/* Whether s is a static kmalloc cache not set up yet (any cache may ask). */
static inline bool kmalloc_unready(const struct uslab_cache *s)
{
	uintptr_t k = ((uintptr_t)s - (uintptr_t)kmalloc_store) / sizeof(*s);

	return k < NR_CLASSES && !(smp_load_acquire(&kmalloc_statics.ready) >> k & 1);
}
/* For n <= 1024, entry n is the class times sizeof(struct cpu_slab): the
 * byte offset of the class's cpu slab in a heap. */
extern const uint16_t kmalloc_small_off[1025];
#define CPU_SLAB_SHIFT 6
extern const uint32_t kmalloc_class_size[NR_CLASSES];

/* Classes above 1024: a table by 128-byte steps (see kmalloc_class_size). */
extern const uint8_t kmalloc_big_class[SMALL_MAX / 128];

static inline unsigned size_class_above_1k(size_t n)
{
	return kmalloc_big_class[(n - 1) >> 7];
}

static inline unsigned size_class(size_t n)
{
	if (likely(n <= 1024))
		return kmalloc_small_off[n] >> CPU_SLAB_SHIFT;
	return size_class_above_1k(n);
}

void *kmalloc_slow(unsigned cls);
void *kmalloc_beyond(size_t n, const void *site);
void *malloc_large_or_huge(size_t n, size_t align, bool *zeroed);

/*
 * Diverting malloc and free to a mode of the layer above (the debug mode,
 * the profiler; also the state before that layer has read its options). The inline paths
 * compare a request with two limits kept in memory rather than with
 * constants, and take a free only from the segment region while the length
 * kept for that test is set: not diverted, that costs nothing (compares
 * with memory instead of immediates, the same instruction count).
 * Diverted, both limits are 0 and the call beyond them is the malloc hook's,
 * so every kmalloc calls the hook; and when frees are diverted too, so is the
 * region's length (segment_divert_frees), so every kfree reaches
 * kfree_slow and calls the free hook. The hooks make their own
 * blocks with kmalloc_direct and kfree_direct, which ignore the divert.
 * A mode that diverts malloc alone may hand out blocks that no kmalloc
 * block starts at (the profiler's, inside one): kfree's fast path refuses
 * them, and kfree_direct asks the stray hook before calling a pointer
 * invalid. Set up by the layer above before the program's threads
 * (kmalloc_divert, kmalloc_divert_stray); the limits are plain loads, the
 * call beyond them a load on that way only (kmalloc_beyond_call).
 */
struct kmalloc_divert {
	size_t small_lim;        /* kmalloc serves n < small_lim from kmalloc_small_off */
	size_t mid_lim;          /* ... n < mid_lim from kmalloc_big_class */
	void *(*beyond)(size_t n, const void *site);   /* n at or above the limits:
							  kmalloc_beyond, or the malloc
							  hook while diverted */
	void (*free)(void *p, const char *call, const void *site);   /* NULL: not diverted */
	bool (*stray)(void *p, const char *call);   /* true: took p, at no block's start */
};
extern struct kmalloc_divert kdiv;   /* starts at the layer above's hooks (api/layout.c) */
#define KMALLOC_SMALL_LIM ((size_t)1024 + 1)
#define KMALLOC_MID_LIM   ((size_t)SMALL_MAX + 1)
/* Divert malloc to malloc_hook (NULL: serve it here again) and, when
 * free_hook is set, every free to it. */
void kmalloc_divert(void *(*malloc_hook)(size_t, const void *),
		    void (*free_hook)(void *, const char *, const void *));
/* Ask hook (NULL: nobody) about every pointer kfree_direct finds no block
 * starting at, before it aborts with "invalid pointer". */
void kmalloc_divert_stray(bool (*hook)(void *, const char *));
/* Tell hook (NULL: nobody) of every large or huge block free is about to
 * give back (the block is one; a huge block's double free may ask too). */
void kmalloc_divert_gone(void (*hook)(void *));
unsigned kmalloc_aligned_class(size_t align, size_t n);   /* align a power of two;
							  NR_CLASSES: not small */
extern bool kmalloc_startup;                  /* the start-up classes serve (classes.c) */
void kmalloc_startup_end(void);               /* ... no longer */

/* arena.c: the start-up arena (a program's first blocks up to 64 KiB, packed) */
#define ARENA_SIZE (256u << 10)
#define ARENA_GRAN 16u
extern char arena[ARENA_SIZE];
extern uint8_t arena_map[ARENA_SIZE / ARENA_GRAN];   /* a byte per granule */
extern bool kmalloc_arena_on;
void *arena_alloc(unsigned cls);              /* NULL once it has ended, or
						 above its classes */
bool arena_owns(const void *p);
void arena_free(void *p, const char *call);
size_t arena_usable_size(const void *p, const char *call);
size_t arena_live_bytes(void);
size_t arena_cut_bytes(void);
size_t arena_held_bytes(void);              /* cut, less the pages given back */
void *kmalloc_aligned(size_t align, size_t n);
size_t kmalloc_usable_size(const void *p, const char *call);
/*
 * The block that starts at p as realloc sees it, looked up once: its usable
 * size (0 when no block starts there - a pointer into one, a freed run or
 * mapping, a foreign pointer: kmalloc_usable_size names it), whether it is
 * small (a slab object or an arena block), and a large block's run.
 */
struct kblock {
	struct slab *run;   /* a large block's run head; else NULL */
	size_t size;
	bool small;
};
void kmalloc_block(const void *p, struct kblock *b, const char *call);
/* Block b at p resized where it is or by its own layer (a large run, a
 * huge mapping); NULL: the caller allocates and copies. */
void *kmalloc_resize_block(void *p, const struct kblock *b, size_t n);
void *kmalloc_resize(void *p, size_t n);   /* the same, p looked up */
bool kmalloc_trim(void);
size_t kmalloc_huge_bytes(void);
size_t kmalloc_huge_count(void);
/* Tests: every descriptor checked (segment_check_descs) as malloc's slabs
 * must be; problems printed, counted. */
long kmalloc_check_descs(void);
void free_nonsmall(void *p, struct slab *slab, const char *call);
noinline void kfree_slow(void *p, const char *call, const void *site);
void kfree_direct(void *p, const char *call);  /* kfree_slow without the divert */
noinline cold __attribute__((noreturn)) void free_invalid(const void *p, const char *call);


/* A free small block's second word holds the free mark (slab.h); the
 * allocation that hands it out again clears it. */
static __always_inline void kfree_mark(void *p, uintptr_t mark)
{
	((uintptr_t *)p)[1] = mark;
}

static __always_inline void *kmalloc_unmark(void *p)
{
	((uintptr_t *)p)[1] = 0;
	return p;
}

/*
 * The malloc fast path, defined once: n below lim->small_lim goes by the
 * class table, below lim->mid_lim by the big-class table, the rest to
 * beyond with the site (the caller's return address, as this is always
 * inlined into an entry point), read only on that way: every n when the
 * limits are 0. The kmalloc caches have ids 0..NR_CLASSES-1, so their cpu
 * slabs sit at fixed places in every heap, and no constructor, so the free
 * pointer is the object's first word.
 */
static __always_inline void *kmalloc_with(size_t n, const struct kmalloc_divert *lim,
					  void *(*beyond)(size_t, const void *))
{
	uintptr_t off;

	if (likely(n < lim->small_lim))
		off = kmalloc_small_off[n];
	else if (likely(n < lim->mid_lim))
		off = (uintptr_t)size_class_above_1k(n) << CPU_SLAB_SHIFT;
	else
		return beyond(n, __builtin_return_address(0));

	void *obj = uslab_cpu_pop_at_((char *)tls_heap + offsetof(struct thread_heap, cpu), &off, 0,
				      fp_key_get());

	if (likely(obj))
		return kmalloc_unmark(obj);
	return kmalloc_slow((unsigned)(off >> CPU_SLAB_SHIFT));
}

/* kmalloc's call beyond its limits: a load only on that way */
static __always_inline void *kmalloc_beyond_call(size_t n, const void *site)
{
	return READ_ONCE(kdiv.beyond)(n, site);
}

static __always_inline void *kmalloc(size_t n)
{
	return kmalloc_with(n, &kdiv, kmalloc_beyond_call);
}

static inline void *large_or_huge_at(size_t n, const void *site)
{
	(void)site;
	return malloc_large_or_huge(n, 0, NULL);
}

/* The hooks' own blocks: never diverted. */
static __always_inline void *kmalloc_direct(size_t n)
{
	static const struct kmalloc_divert fixed = { .small_lim = KMALLOC_SMALL_LIM,
						     .mid_lim = KMALLOC_MID_LIM };

	return kmalloc_with(n, &fixed, large_or_huge_at);
}

/*
 * Whether p is an object of one of malloc's slabs, by the inline look: in
 * the segment region, and at an object's start by its own unit's
 * descriptor's free-check fields (zero for a free unit, a large run, a
 * uslab_cache slab, a slot of the region no segment is in). *seg and *d
 * locate that descriptor (desc_at): the region is aligned to segments, so
 * p's offset in it gives the descriptor's; *seg is 0 when p is outside
 * the region. false: the slow look tells.
 */
static __always_inline bool kmalloc_fast_object(const void *p, uintptr_t *seg, uintptr_t *d)
{
	uintptr_t rel;

	if (!likely(segment_region_fast((uintptr_t)p, &rel))) {
		*seg = 0;
		return false;
	}
	*seg = (uintptr_t)p & ~(SEG_SIZE - 1);
	*d = unit_desc_off((const void *)rel);
	return likely(object_offset_valid(desc_at(*seg, *d)->kfree_magic, desc_at(*seg, *d)->kfree_limit,
					  (uintptr_t)p - desc_at(*seg, *d)->base));
}

/*
 * realloc's look at p, inline where it can be (free's look for a slab
 * object; a large run's head descriptor is p's own unit's): b as
 * kmalloc_block gives it, and true; false when kmalloc_block must look.
 * It reads no byte of the block (a string appended to is written at its
 * end, not at its start).
 */
static __always_inline bool kmalloc_block_fast(const void *p, struct kblock *b)
{
	uintptr_t seg, d;

	if (likely(kmalloc_fast_object(p, &seg, &d))) {
		b->run = NULL;
		b->small = true;
		b->size = READ_ONCE(desc_at(seg, d)->head)->cache->stride;
		return true;
	}
	if (!seg)   /* not in the region */
		return false;
	struct slab *head = desc_at(seg, d);

	if (READ_ONCE(head->head) != head || head->kind != SLAB_KIND_LARGE ||
	    head->base != (uintptr_t)p)
		return false;
	b->run = head;
	b->small = false;
	b->size = (size_t)head->nunits << UNIT_SHIFT;
	return true;
}

/* The units a large run of n bytes takes. */
static inline unsigned units_of(size_t n)
{
	return (unsigned)((n + UNIT_SIZE - 1) >> UNIT_SHIFT);
}

/*
 * Whether block b holds n bytes where it is, with nothing to do: a small
 * block or a huge one that n still fits and would not fit in half (a
 * buffer that shrinks a little often grows again; a huge one is asked a
 * hundred times per page when appended to in small steps), a large run
 * likewise by units, while n stays above LARGE_MIN.
 */
static inline bool kblock_holds(const struct kblock *b, size_t n)
{
	if (n > b->size)
		return false;
	if (b->small)
		return n > b->size / 2 || b->size <= 16;
	if (b->run)
		return n > LARGE_MIN && units_of(n) > b->run->nunits / 2u;
	return n > b->size / 2;
}

/*
 * The fast path takes a valid object of malloc's (kfree_magic is 0 for
 * every other slab) that is not free already (its second word's low byte
 * is not the free mark's: free_mark_maybe; the slow path tells a double
 * free, wherever the block waits, by the whole word) of a slab this thread
 * owns — onto its cpu freelist for the class (slab->owner_cpu), whatever
 * slab of the class it is, so that the next malloc of the class takes it
 * back while its lines are still in cache — of a slab another thread owns,
 * into this thread's message to that owner while it has room (outbox_add),
 * or of a slab nobody owns, onto this thread's cpu freelist for the class
 * while its foreign budget lasts (a thread without a heap has none), and
 * marks it free. None is an atomic. kfree_slow looks again and tells
 * everything else apart.
 */
static __always_inline void kfree(void *p, const char *call)
{
	uintptr_t seg, d;

	if (likely(kmalloc_fast_object(p, &seg, &d))) {
		uintptr_t mark = free_mark;

		if (unlikely(free_mark_maybe(p, mark)))
			goto slow;
		/* p's own unit's descriptor has the slab's owner fields
		 * (slab_owner_units): no load of the head on this way */
		if (likely(READ_ONCE(desc_at(seg, d)->owner_tp) == thread_self())) {
			uslab_cpu_link_(cpu_fast(READ_ONCE(desc_at(seg, d)->owner_cpu)), p, 0,
					fp_key_get());
			kfree_mark(p, mark);
			return;
		} else {
			struct slab *slab = READ_ONCE(desc_at(seg, d)->head);
			struct uslab_cache *s = slab->cache;
			/* a fresh load, so that the owner test above can compare
			 * against memory instead of keeping the heap in a register */
			struct thread_heap *h = READ_ONCE(tls_heap);
			struct cpu_slab *c = (struct cpu_slab *)((char *)h + s->cpu_offset);

			if (READ_ONCE(slab->owner_tp)) {
				if (likely(outbox_add(h, s, slab, p))) {
					kfree_mark(p, mark);
					return;
				}
			} else if (likely(c->foreign_left)) {
				c->foreign_left--;
				uslab_cpu_link_(cpu_fast(c), p, 0, fp_key_get());
				kfree_mark(p, mark);
				return;
			}
		}
	}
slow:
	kfree_slow(p, call, __builtin_return_address(0));
}

#pragma GCC visibility pop

#endif /* USLAB_KMALLOC_H */
