/* SPDX-License-Identifier: MIT */
/*
 * kmalloc.h - size classes and the inline malloc/free fast paths.
 *
 * Three block kinds, all found from a pointer by one lookup:
 *   small  <= SMALL_MAX       an object of one of NR_CLASSES static caches
 *   large  <= LARGE_MAX       a run of 16 KiB units inside a segment
 *   huge   >  LARGE_MAX       its own mapping, tracked in the huge table
 *                             (also: alignment > 16 KiB beyond small sizes)
 *
 * Classes: 8, 16, 32, 48, 64, 80, 96, 112, 128, then four per doubling
 * (160, 192, 224, 256, 320, ...) up to 32 KiB: 41 classes, at most 25 %
 * internal waste above 128 bytes. Every class is a multiple of
 * min(16, its largest power-of-two divisor), so each object is aligned to
 * min(16, largest power of two <= its size).
 */
#ifndef USLAB_KMALLOC_H
#define USLAB_KMALLOC_H

#include "internal.h"

#define SMALL_MAX   (32u << 10)
#define LARGE_MAX   (2ul << 20)
#define NR_CLASSES  41

extern struct uslab_cache kmalloc_caches[NR_CLASSES];
extern const uint8_t kmalloc_small_index[17];
extern const uint32_t kmalloc_class_size[NR_CLASSES];

static inline unsigned size_class(size_t n)
{
	if (n <= 128)
		return kmalloc_small_index[(n + 7) >> 3];
	unsigned k = 63 - __builtin_clzl(n - 1);       /* 2^k < n <= 2^(k+1) */
	return 9 + (k - 7) * 4 + (unsigned)((n - 1 - (1ul << k)) >> (k - 2));
}

void *malloc_large_or_huge(size_t n, size_t align);
void *kmalloc_aligned(size_t align, size_t n);
void *kmalloc_resize(void *p, size_t n);
size_t kmalloc_usable_size(const void *p, const char *call);
bool kmalloc_trim(void);
size_t kmalloc_huge_bytes(void);
size_t kmalloc_huge_count(void);
void kmalloc_fork_prepare(void);
void kmalloc_fork_release(void);
void free_nonsmall(void *p, struct slab *slab, const char *call);
noinline cold void free_invalid(const void *p, const char *call);

/* Divisibility by the stride with one multiply (Lemire's test): off is on
 * an object boundary iff off * ceil(2^64 / stride) < ceil(2^64 / stride). */
static inline bool on_object_boundary(const struct uslab_cache *s, uintptr_t off)
{
	return off * s->stride_magic < s->stride_magic;
}

static inline void *kmalloc(size_t n)
{
	if (likely(n <= SMALL_MAX))
		return cache_alloc_fast(&kmalloc_caches[size_class(n)]);
	return malloc_large_or_huge(n, 0);
}

static inline void kfree(void *p, const char *call)
{
	if (unlikely(!p))
		return;
	struct slab *slab = ptr_to_slab(p);
	if (unlikely(!slab || slab->kind != SLAB_KIND_SLAB)) {
		free_nonsmall(p, slab, call);
		return;
	}
	struct uslab_cache *s = slab->cache;
	if (unlikely(!on_object_boundary(s, (uintptr_t)p - slab->base)))
		free_invalid(p, call);
	cache_free_fast(s, p);
}

#endif /* USLAB_KMALLOC_H */
