/* SPDX-License-Identifier: MIT */
/*
 * frames_fp.c - unwind_unit's shapes with frame pointers (built with -O2
 * -fno-omit-frame-pointer): every CFA from rbp.
 */
#include "frames.h"

#include <string.h>

#define noinline __attribute__((noinline))

noinline int fp_recurse(int depth, leaf_fn leaf, int x)
{
	int r = depth <= 0 ? leaf(x) : nofp_recurse(depth - 1, leaf, x + 1);

	return r + depth;
}

noinline int fp_vla(int n, leaf_fn leaf, int x)
{
	char v[n];

	memset(v, x, (size_t)n);
	__asm__ __volatile__("" : : "r"(v) : "memory");
	int r = nofp_clobber_rbp(leaf, v[n - 1]);

	return r + v[0];
}
