/* SPDX-License-Identifier: MIT */
/*
 * local.h - what the files of the malloc layer share among themselves:
 *   classes.c  size-class tables, the static caches' setup, start-up classes
 *   arena.c    the start-up arena
 *   huge.c     huge blocks and their table
 *   kmalloc.c  slow paths, large blocks, sizes, resize, trim
 * Nothing outside malloc/ includes it.
 */
#ifndef USLAB_MALLOC_LOCAL_H
#define USLAB_MALLOC_LOCAL_H

#include "kmalloc.h"

#pragma GCC visibility push(hidden)

/* classes.c */
void *kmalloc_class_alloc(struct uslab_cache *s);   /* sets s up first if need be */

/* huge.c */
void *huge_alloc(size_t n, size_t align, bool thp_wanted, bool *zeroed);
bool huge_free(const void *p);
bool huge_was_freed(const void *p);   /* one of the last huge blocks freed */
bool huge_usable_size(const void *p, size_t *size);
void *huge_resize(void *p, size_t n);

#pragma GCC visibility pop

#endif
