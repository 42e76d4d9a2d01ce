/* SPDX-License-Identifier: MIT */
/*
 * frames_fp.c - unwind_unit's shapes with frame pointers (built with -O2
 * -fno-omit-frame-pointer): every CFA from rbp.
 */
#include "frames.h"

#define noinline __attribute__((noinline))

noinline int fp_recurse(int depth, leaf_fn leaf, int x)
{
	int r = depth <= 0 ? leaf(x) : nofp_recurse(depth - 1, leaf, x + 1);

	return r + depth;
}

/* A fixed frame below rbp, calling into the file without frame pointers:
 * the frames above it find rbp where this one saved it. */
noinline int fp_locals(leaf_fn leaf, int x)
{
	volatile int local[16];

	for (int i = 0; i < 16; i++)
		local[i] = x + i;
	int r = nofp_vla(100 + x, leaf, local[3]);

	return r + local[7];
}
