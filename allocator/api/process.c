/* SPDX-License-Identifier: MIT */
/*
 * process.c - process life: start-up (options, statistics signal) and fork
 * handlers over every layer's locks.
 *
 * prepare takes every allocator lock in rank order (platform.h's enum
 * lock_rank: kmalloc init, huge table, cache registry, heaps, each heap,
 * each cache's list_lock, segments, huge ranges, metadata, the start-up
 * arena; then the dwcas stripes), so no lock is held at fork() by a thread
 * that will not exist in the child. The parent unlocks them; the child
 * re-initialises them (a ticket lock may have had waiters queued, threads
 * the child does not have) and can allocate at once.
 */
#include "api.h"
#include "options.h"

#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

/*
 * A process that never made a thread (glibc's __libc_single_threaded) has no
 * thread that could hold a lock at fork(): the one thread is in fork(), not
 * in the allocator. Taking every lock would only write their pages, and
 * releasing them write them again in both processes, a page copy each side
 * of every fork (a shell, make or xargs forks for each command): so such a
 * process takes none. The choice is made in prepare, before the fork, and
 * only read after it.
 */
static bool fork_locked;

/* For tests: whether the last fork's handlers took the locks. */
bool uslab_fork_took_locks_(void)
{
	return fork_locked;
}

static void fork_prepare(void)
{
	bool lock = !process_single_threaded();

	if (fork_locked != lock)   /* no write in the usual case */
		fork_locked = lock;
	if (!lock)
		return;
	/* rank order (platform.h): the static locks above the registry, the
	 * cache layer's (registry, heaps, lists), the static ones below, then
	 * the toolkit's dwcas stripes (leaves inside dwcas) */
	fork_locks_take(RANK_KMALLOC_INIT, RANK_REGISTRY - 1);
	caches_lock_all();
	fork_locks_take(RANK_LIST + 1, RANK_MAX - 1);
	dwcas_lock_all();
}

static void fork_release(bool child)
{
	if (!fork_locked)
		return;
	dwcas_unlock_all(child);
	if (child)
		segment_fork_child();
	fork_locks_release(RANK_LIST + 1, RANK_MAX - 1, child);
	caches_unlock_all(child);
	fork_locks_release(RANK_KMALLOC_INIT, RANK_REGISTRY - 1, child);
}

static void fork_parent(void)
{
	fork_release(false);
}

/*
 * The threads that did not survive the fork may have been anywhere in a slow
 * path (no lock held, but a chain half-walked), so the child does not touch
 * their heaps: it keeps them marked live, and their cached slabs stay with
 * them (a bounded amount per thread; fork-then-exec loses nothing).
 */
static void fork_child(void)
{
	fork_release(true);
}

static void verbose_line(const char *line, void *arg)
{
	(void)arg;
	fprintf(stderr, "uslab: %s\n", line);
}

/* USLAB_VERBOSE=1: what this process runs with, before it allocates. */
static void verbose_report(void)
{
	fprintf(stderr, "uslab: version %d.%d, pid %d, double-width CAS: %s\n", USLAB_VERSION_MAJOR,
		USLAB_VERSION_MINOR, (int)getpid(), dwcas_path_name());
	options_report(verbose_line, NULL);
}

/* Named by the linker option every program linking libuslab.a gets
 * (allocator/CMakeLists.txt, uslab.pc): nothing else references this file,
 * and without it such a program would have no fork handlers and read no
 * options before its first allocation. */
const char uslab_process_linked_ = 1;

__attribute__((constructor)) static void uslab_process_init(void)
{
	options_init();
	options_mark_warned();
	dwcas_init();
	if (option(OPT_VERBOSE))
		verbose_report();
	stats_init();
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}
