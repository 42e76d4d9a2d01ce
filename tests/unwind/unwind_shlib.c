/* SPDX-License-Identifier: MIT */
/* unwind_shlib.c - libunwind_shlib.so: two frames in a shared library. */
#include "frames.h"

__attribute__((noinline)) static int shlib_inner(leaf_fn leaf, int x)
{
	volatile int k = x;
	int r = leaf(k);

	return r * 2 + k;
}

int unwind_shlib_call(leaf_fn leaf, int x)
{
	return shlib_inner(leaf, x) + 1;
}
