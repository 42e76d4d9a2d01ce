/* SPDX-License-Identifier: MIT */
/*
 * unwind_dl.c - libunwind_dl_a.so and libunwind_dl_b.so: one frame whose
 * size (UNWIND_DL_FRAME, both above 127, so that the code is the same
 * length) is all that differs. Loaded at the same address one after the
 * other, their return addresses coincide and their CFAs do not: a rule
 * kept from the first would walk the second wrong.
 */
#include "frames.h"

int unwind_dl_call(leaf_fn leaf, int x)
{
	volatile char frame[UNWIND_DL_FRAME];

	frame[0] = (char)x;
	int r = leaf(x);

	return r + frame[0];
}
