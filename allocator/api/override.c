/* SPDX-License-Identifier: MIT */
/*
 * override.c - the standard malloc names (built into libuslab-malloc.so when
 * USLAB_OVERRIDE is on) and glibc's __libc_ aliases, so memory never
 * crosses allocators. (The fork handlers are process.c's.)
 *
 * malloc and free expand the inline fast paths here (no extra call); the
 * rest tail-call the uslab_ functions.
 */
#define _GNU_SOURCE
#include "api.h"

#include <malloc.h>
#include <stdlib.h>

#define EXPORT USLAB_API

/* malloc and free: the inline paths (kmalloc.h; the debug mode diverts them) */
EXPORT void *malloc(size_t n)
{
	return kmalloc(n);
}

EXPORT void free(void *p)
{
	kfree(p, "free");
}

EXPORT void *calloc(size_t n, size_t m) { return uslab_calloc(n, m); }
EXPORT void *realloc(void *p, size_t n) { return uslab_realloc(p, n); }
EXPORT void *reallocarray(void *p, size_t n, size_t m) { return uslab_reallocarray(p, n, m); }
EXPORT int posix_memalign(void **out, size_t a, size_t n) { return uslab_posix_memalign(out, a, n); }
EXPORT void *aligned_alloc(size_t a, size_t n) { return uslab_aligned_alloc(a, n); }
EXPORT void *memalign(size_t a, size_t n) { return uslab_memalign(a, n); }
EXPORT void *valloc(size_t n) { return uslab_valloc(n); }
EXPORT void *pvalloc(size_t n) { return uslab_pvalloc(n); }
EXPORT size_t malloc_usable_size(void *p) { return uslab_malloc_usable_size(p); }
EXPORT void free_sized(void *p, size_t n) { uslab_free_sized(p, n); }
EXPORT void free_aligned_sized(void *p, size_t a, size_t n) { uslab_free_aligned_sized(p, a, n); }
EXPORT void cfree(void *p) { free(p); }
EXPORT int malloc_trim(size_t pad) { (void)pad; return uslab_trim(); }
EXPORT int mallopt(int param, int value) { return uslab_mallopt(param, value); }
EXPORT int malloc_info(int options, FILE *f) { return uslab_malloc_info(options, f); }
EXPORT void malloc_stats(void) { uslab_malloc_stats(); }

EXPORT struct mallinfo2 mallinfo2(void)
{
	struct uslab_mallinfo u = uslab_mallinfo();
	struct mallinfo2 m = {
		.arena = u.arena, .ordblks = u.ordblks, .smblks = u.smblks, .hblks = u.hblks,
		.hblkhd = u.hblkhd, .usmblks = u.usmblks, .fsmblks = u.fsmblks,
		.uordblks = u.uordblks, .fordblks = u.fordblks, .keepcost = u.keepcost,
	};
	return m;
}

EXPORT struct mallinfo mallinfo(void)
{
	struct uslab_mallinfo u = uslab_mallinfo();
	struct mallinfo m = {
		.arena = (int)u.arena, .hblks = (int)u.hblks, .hblkhd = (int)u.hblkhd,
		.uordblks = (int)u.uordblks, .fordblks = (int)u.fordblks,
	};
	return m;
}

/* glibc's internal names: programs that call them directly must get ours. */
EXPORT void *__libc_malloc(size_t n) { return malloc(n); }
EXPORT void __libc_free(void *p) { free(p); }
EXPORT void *__libc_calloc(size_t n, size_t m) { return uslab_calloc(n, m); }
EXPORT void *__libc_realloc(void *p, size_t n) { return uslab_realloc(p, n); }
EXPORT void *__libc_memalign(size_t a, size_t n) { return uslab_memalign(a, n); }
EXPORT void *__libc_valloc(size_t n) { return uslab_valloc(n); }
EXPORT void *__libc_pvalloc(size_t n) { return uslab_pvalloc(n); }
EXPORT int __posix_memalign(void **out, size_t a, size_t n) { return uslab_posix_memalign(out, a, n); }
EXPORT void __libc_cfree(void *p) { free(p); }
