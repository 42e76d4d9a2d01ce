/* SPDX-License-Identifier: MIT */
/*
 * platform.c - the error reporter, the internal-check failures, the lock-
 * order checker of debug builds, and deferred work.
 */
#define _GNU_SOURCE
#include "platform.h"

int vg_state = -1;

/* Memcheck answers a request for the validity bits of an addressable byte
 * (1); without valgrind, or under another tool, the request returns 0. */
bool vg_memcheck_probe(void)
{
#if VG_HOOKS
	char byte = 0, vbits;

	return RUNNING_ON_VALGRIND && VALGRIND_GET_VBITS(&byte, &vbits, 1) == 1;
#else
	return false;
#endif
}

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#if !(defined(__has_builtin) && __has_builtin(__builtin_thread_pointer))
__thread char thread_self_anchor;
#endif

#ifdef USLAB_INTERLEAVE
void (*uslab_interleave_hook)(const char *point);   /* INTERLEAVE(): set by a test */
#endif

/* Formats on the stack and writes with write(2): nothing here allocates. */
static void say(const char *buf, int n, size_t size)
{
	if (n > 0 && write(2, buf, (size_t)n < size ? (size_t)n : size - 1) < 0)
		return;
}

noinline cold void uslab_fatal(const char *call, const void *p, const char *what)
{
	char buf[256];

	say(buf, snprintf(buf, sizeof(buf), "uslab: %s(): %s %p\n", call, what, p), sizeof(buf));
	abort();
}

noinline cold void uslab_assert_fail(const char *cond, const char *file, int line)
{
	char buf[512];

	say(buf, snprintf(buf, sizeof(buf), "uslab: internal check failed: %s (%s:%d)\n", cond,
			  file, line),
	    sizeof(buf));
	abort();
}

#if USLAB_ASSERTS >= 1
/*
 * The ranks the calling thread holds, as a count per rank: a new lock must
 * rank at least as high as every lock held. Equal ranks are allowed (the
 * walks that lock every heap, or every cache's list, take them in list
 * order, and only they do).
 */
static __thread uint8_t held[RANK_MAX];
static __thread uint8_t top;   /* highest rank held, 0 for none */

void lock_rank_acquire(enum lock_rank r)
{
	if (r < top)
		uslab_assert_fail("lock taken out of rank order (docs/architecture.md)", __FILE__,
				  (int)r);
	held[r]++;
	top = (uint8_t)r;
}

void lock_rank_release(enum lock_rank r)
{
	if (!held[r])
		uslab_assert_fail("lock released that this thread does not hold", __FILE__, (int)r);
	held[r]--;
	while (top && !held[top])
		top--;
}
#endif

/* ---- locks a fork must hold ------------------------------------------------------- */

/* The linker's bounds of the section. Weak: a program that links only some
 * of libuslab.a's objects may have no fork lock at all, and then no section
 * (both read as NULL, and the walks below do nothing). */
extern const struct fork_lock __start_uslab_fork_locks[] __attribute__((weak, visibility("hidden")));
extern const struct fork_lock __stop_uslab_fork_locks[] __attribute__((weak, visibility("hidden")));

void fork_locks_take(enum lock_rank lo, enum lock_rank hi)
{
	for (int r = (int)lo; r <= (int)hi; r++)
		for (const struct fork_lock *f = __start_uslab_fork_locks; f < __stop_uslab_fork_locks; f++)
			if ((int)f->rank == r)
				lock_ranked(f->lock, f->rank);
}

void fork_locks_release(enum lock_rank lo, enum lock_rank hi, bool child)
{
	for (int r = (int)hi; r >= (int)lo; r--)
		for (const struct fork_lock *f = __start_uslab_fork_locks; f < __stop_uslab_fork_locks; f++)
			if ((int)f->rank == r)
				unlock_ranked_fork(f->lock, f->rank, child);
}

/* ---- deferred work -------------------------------------------------------------- */

int deferred_pending;
static void (*deferred_fn)(void);

void deferred_register(void (*fn)(void))
{
	WRITE_ONCE(deferred_fn, fn);
}

void deferred_run(void)
{
	int one = 1;
	void (*fn)(void) = READ_ONCE(deferred_fn);

	/* acq_rel: one thread takes the request; pairs with nothing else (the
	 * handler's relaxed store only asks) */
	if (try_cmpxchg_acq_rel(&deferred_pending, &one, 0) && fn)
		fn();
}
