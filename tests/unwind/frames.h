/* SPDX-License-Identifier: MIT */
/*
 * frames.h - the stack shapes unwind_unit walks, spread over files built
 * with and without frame pointers (tests/CMakeLists.txt), a shared library
 * linked in and two loaded with dlopen. Each shape calls leaf(x) at its
 * top and uses the result after the call, so that no call is a tail call
 * and every frame stays on the stack.
 */
#ifndef USLAB_TEST_UNWIND_FRAMES_H
#define USLAB_TEST_UNWIND_FRAMES_H

#include <stddef.h>

typedef int (*leaf_fn)(int x);

/* frames_nofp.c, built with -fomit-frame-pointer */
int nofp_recurse(int depth, leaf_fn leaf, int x);    /* each level a frame of its own */
int nofp_clobber_rbp(leaf_fn leaf, int x);           /* rbp saved, then a general register */
int nofp_alloca(size_t n, leaf_fn leaf, int x);      /* CFA from rbp, calls nofp_clobber_rbp */
int nofp_vla(int n, leaf_fn leaf, int x);            /* the same with a VLA */
int nofp_big_frame(leaf_fn leaf, int x);             /* 64 KiB of locals below the CFA */

/* frames_fp.c, built with -fno-omit-frame-pointer */
int fp_recurse(int depth, leaf_fn leaf, int x);      /* alternates with nofp_recurse */
int fp_locals(leaf_fn leaf, int x);                 /* a fixed frame, calls nofp_vla */

/* unwind_shlib.c: libunwind_shlib.so, linked in */
int unwind_shlib_call(leaf_fn leaf, int x);

/* unwind_dl.c: libunwind_dl_a.so and libunwind_dl_b.so, the same code
 * but for the size of a frame, loaded one after the other with dlopen */
int unwind_dl_call(leaf_fn leaf, int x);

#endif
