/* SPDX-License-Identifier: MIT */
/*
 * unwind.h - the calling thread's stack as return addresses, what glibc's
 * backtrace() gives, for the heap profiler, which takes one per sample.
 *
 * On x86-64 the stack is walked from the unwind tables (.eh_frame, found
 * through each object's .eh_frame_hdr), the way libgcc's unwinder walks
 * it, but with the rule of each return address reduced to one word and
 * kept in a cache, so that a frame seen before costs a look-up and two
 * loads (unwind.c has the details):
 *
 *   rule, 32 bits:   31          22 21                      2 1    0
 *                   | rbp slot: 10 |     CFA offset / 8: 20  | kind |
 *
 *   kind       RULE_RSP: CFA = rsp + offset; RULE_RBP: CFA = rbp + offset;
 *              RULE_STOP: the stack ends here (the outermost frame, a
 *              signal frame, code without unwind tables, a rule this
 *              reduction cannot hold)
 *   rbp slot   0: the caller's rbp is this frame's; n: saved at CFA - 8n
 *   and always: the return address at CFA - 8, the caller's rsp = CFA.
 *
 * Every load from the stack is checked against the calling thread's stack
 * and each frame's CFA must lie above the last, so an unwind never faults
 * and always ends; a stack may end early (at a rule it cannot use), never
 * with a frame the unwind tables do not give.
 *
 * Elsewhere (UNWIND_CACHED 0), and on x86-64 when the stack pointer is not
 * on the thread's stack (a signal handler's alternate stack, a coroutine's
 * stack), it is glibc's backtrace().
 */
#ifndef USLAB_UNWIND_H
#define USLAB_UNWIND_H

#include <stdint.h>

#if defined(__x86_64__) && defined(__linux__) && defined(__GLIBC__)
#define UNWIND_CACHED 1
#else
#define UNWIND_CACHED 0
#endif

#pragma GCC visibility push(hidden)

/* Once, before the first unwind_stack and before the program's threads:
 * maps the cache (x86-64), or makes backtrace() load libgcc's unwinder,
 * whose first use allocates. The caller keeps allocations made here from
 * being sampled. Without it, unwind_stack works uncached. */
void unwind_init(void);

/*
 * The calling thread's stack into pc[max], innermost first: pc[0] is the
 * return address into the caller of unwind_stack (as backtrace()'s first
 * entry is into the caller of backtrace), then its caller's, and so on.
 * Returns how many were written, at most max. May allocate the first time
 * a thread calls it (pthread_getattr_np), and on the fallback's first use.
 */
unsigned unwind_stack(const void **pc, unsigned max);

/* For the tests: forget every cached rule, and how many rules unwind_stack
 * had to work out from the unwind tables since the process began (0
 * without the cache). */
void unwind_cache_flush(void);
unsigned long unwind_rules_computed(void);

#pragma GCC visibility pop

#endif /* USLAB_UNWIND_H */
