/* SPDX-License-Identifier: MIT */
/*
 * frames_nofp.c - unwind_unit's shapes without frame pointers (built with
 * -O2 -fomit-frame-pointer): CFAs from rsp, and from rbp where a frame's
 * size is only known at run time; rbp used as a general register.
 */
#include "frames.h"

#include <alloca.h>
#include <string.h>

#define noinline __attribute__((noinline))

noinline int nofp_recurse(int depth, leaf_fn leaf, int x)
{
	int r = depth <= 0 ? leaf(x) : depth % 3 == 0 ? fp_recurse(depth - 1, leaf, x + 1) :
							   nofp_recurse(depth - 1, leaf, x + 1);

	return r + depth;
}

/* Seven values live across the call: they need every callee-saved
 * register, rbp among them, which the CFI then says is saved. A walk that
 * does not restore rbp from there reads the callers' frames wrong. */
noinline int nofp_clobber_rbp(leaf_fn leaf, int x)
{
	volatile int in = x;
	int a = in * 3, b = in * 5, c = in * 7, d = in * 11, e = in * 13, f = in * 17, g = in * 19;
	int r = leaf(x);

	return r + a * b + c * d + e * f + g + a + b + c + d + e + f;
}

noinline int nofp_alloca(size_t n, leaf_fn leaf, int x)
{
	char *p = alloca(n);

	memset(p, x, n);
	__asm__ __volatile__("" : : "r"(p) : "memory");
	int r = nofp_clobber_rbp(leaf, p[n - 1]);

	return r + p[0];
}

noinline int nofp_vla(int n, leaf_fn leaf, int x)
{
	char v[n];

	memset(v, x, (size_t)n);
	__asm__ __volatile__("" : : "r"(v) : "memory");
	int r = nofp_clobber_rbp(leaf, v[n - 1]);

	return r + v[0];
}

noinline int nofp_big_frame(leaf_fn leaf, int x)
{
	volatile char big[64 << 10];

	big[0] = (char)x;
	big[sizeof(big) - 1] = (char)x;
	int r = leaf(x);

	return r + big[0] + big[sizeof(big) - 1];
}
