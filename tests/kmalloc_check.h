/* SPDX-License-Identifier: MIT */
/*
 * kmalloc_check.h - for tests that link the allocator's internals: validate
 * every kmalloc cache set up so far and every segment's descriptors
 * (uslab_cache_validate and kmalloc_check_descs print what they find).
 * Returns the number of problems, 0 when all hold.
 */
#ifndef USLAB_KMALLOC_CHECK_H
#define USLAB_KMALLOC_CHECK_H

#include "api.h"
#include "uslab.h"

static inline long kmalloc_validate_all(void)
{
	long bad = 0;

	for (unsigned c = 0; c < NR_CLASSES; c++)
		if (!kmalloc_unready(&kmalloc_store[c]))
			bad += uslab_cache_validate(&kmalloc_store[c]);
	return bad + kmalloc_check_descs();
}

#endif
