/* SPDX-License-Identifier: MIT */
/*
 * platform.h - the layer under every other: the operating system (mappings,
 * the clock, the page size), the calling thread's identity, the one error
 * reporter, deferred work for signal handlers, internal checks, and the
 * helpers every layer shares. Nothing here allocates or knows of slabs.
 *
 *   toolkit (atomic/)  <  platform  <  segment  <  slab  <  cache  <  malloc  <  api
 *
 * docs/architecture.md draws the layers; tools/check-layers enforces that
 * each file includes only its own layer's headers and those below.
 */
#ifndef USLAB_PLATFORM_H
#define USLAB_PLATFORM_H

/* The toolkit headers the layers use, all here: they must come before the
 * noinline and cold macros below, which would expand inside theirs. */
#include "atomic.h"
#include "biased.h"
#include "dwcas.h"
#include "kref.h"
#include "mailbox.h"
#include "mutex.h"
#include "qrwlock.h"
#include "spinlock.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#if __has_include(<sys/single_threaded.h>)
#include <sys/single_threaded.h>
#define USLAB_HAVE_SINGLE_THREADED 1
#endif

/* Everything declared from here on is internal to the library: hidden, so
 * the fast paths reach it without a trip through the GOT. */
#pragma GCC visibility push(hidden)

#define USLAB_API __attribute__((visibility("default")))
/* After every toolkit header: these names must not expand inside theirs. */
#define noinline __attribute__((__noinline__))
#define cold __attribute__((__cold__))
/* A function of a file whose code the shared libraries keep apart as cold
 * (allocator/cold-text.ld) that every process may run - its constructors
 * and destructors, and what runs before the options are read: it stays with
 * the code that runs, so that its page does not bring the cold ones in. */
#define every_process __attribute__((__section__(".text.every_process")))

#define CACHE_LINE     64
#define HUGE_PAGE_SIZE (2ul << 20)   /* a transparent huge page (x86-64, arm64 4K) */

#define round_up(x, a) (((x) + (a) - 1) & ~((uintptr_t)(a) - 1))
#define container_of(p, T, m) ((T *)((char *)(p) - offsetof(T, m)))

/* ---- checks ------------------------------------------------------------------
 * Three tiers. Misuse a program can commit (a bad pointer, a double free) is
 * always checked, cheaply, and reported with uslab_fatal. Internal
 * invariants are ASSERT()s, compiled in when USLAB_ASSERTS >= 1 (the debug
 * preset): the state transitions of docs/slab.md and the lock order. Whole-
 * structure walks are ASSERT_EXPENSIVE(), compiled in at USLAB_ASSERTS >= 2
 * (the check preset). In a release build neither evaluates its argument.
 */
#ifndef USLAB_ASSERTS
#define USLAB_ASSERTS 0
#endif
noinline cold __attribute__((noreturn)) void uslab_assert_fail(const char *cond, const char *file,
								int line);
#if USLAB_ASSERTS >= 1
#define ASSERT(c) (likely(c) ? (void)0 : uslab_assert_fail(#c, __FILE__, __LINE__))
#else
#define ASSERT(c) ((void)sizeof(!(c)))
#endif
#if USLAB_ASSERTS >= 2
#define ASSERT_EXPENSIVE(c) ASSERT(c)
#else
#define ASSERT_EXPENSIVE(c) ((void)sizeof(!(c)))
#endif

/* One line on stderr naming the call, the problem and the pointer, then
 * abort(). Allocates nothing (the heap may be what is broken). */
noinline cold __attribute__((noreturn)) void uslab_fatal(const char *call, const void *p,
							  const char *what);

/* ---- lock order -----------------------------------------------------------------
 * Every allocator lock has a rank; a thread takes locks in rising rank only
 * (equal ranks: the walks that take every heap's or every cache's lock in
 * list order). Checked by lock_ranked()/unlock_ranked() when USLAB_ASSERTS
 * >= 1; in a release build they are mutex_lock/mutex_unlock. Every
 * allocator lock is a mutex_t (atomic/mutex.h: not FIFO, waiters sleep), so
 * a preempted waiter never holds the others up. Outer first:
 */
enum lock_rank {
	RANK_KMALLOC_INIT = 1,   /* malloc/: one class set up at a time */
	RANK_HUGE,               /* malloc/: the huge-block table */
	RANK_REGISTRY,           /* cache/: the cache registry (qrwlock, not ranked) */
	RANK_HEAPS,              /* cache/: the list of thread heaps */
	RANK_HEAP,               /* cache/: one heap (its flush) */
	RANK_LIST,               /* slab/: a cache's partial list */
	RANK_SEG,                /* segment/: segments and their unit maps */
	RANK_RANGES,             /* segment/: freed huge ranges kept for reuse */
	RANK_META,               /* segment/: metadata memory */
	RANK_ARENA,              /* malloc/: the start-up arena (a leaf) */
	RANK_OPTIONS,            /* platform/: the first read of the environment */
	RANK_DEBUG,              /* the debug mode's tables and quarantines, malloc's (api/)
	                            and the caches' (cache/): leaves, never held together */
	RANK_UNWIND,             /* platform/: the unwinder's cache of rules (a leaf) */
	RANK_MAX
};
#if USLAB_ASSERTS >= 1
void lock_rank_acquire(enum lock_rank r);
void lock_rank_release(enum lock_rank r);
#else
static inline void lock_rank_acquire(enum lock_rank r) { (void)r; }
static inline void lock_rank_release(enum lock_rank r) { (void)r; }
#endif

static inline void lock_ranked(mutex_t *l, enum lock_rank r)
{
	lock_rank_acquire(r);
	mutex_lock(l);
}

static inline void unlock_ranked(mutex_t *l, enum lock_rank r)
{
	mutex_unlock(l);
	lock_rank_release(r);
}

/* fork handlers: the parent unlocks, the child re-initialises */
static inline void unlock_ranked_fork(mutex_t *l, enum lock_rank r, bool child)
{
	mutex_unlock_fork(l, child);
	lock_rank_release(r);
}

/* ---- locks a fork must hold -------------------------------------------------------
 * A static lock that fork() must not catch held by a thread the child will
 * not have is declared with FORK_LOCK(lock, rank) beside its definition:
 * an entry in the uslab_fork_locks section. api/process.c takes them in
 * rank order (around the cache layer's, which are not static), the parent
 * lets go of them and the child re-initialises them.
 */
struct fork_lock {
	mutex_t *lock;
	enum lock_rank rank;
};
#define FORK_LOCK(l, r)                                                                    \
	static const struct fork_lock fork_lock_##l                                       \
		__attribute__((used, section("uslab_fork_locks"), aligned(sizeof(void *)))) = \
		{ &(l), (r) }
void fork_locks_take(enum lock_rank lo, enum lock_rank hi);   /* ranks lo..hi, rising */
void fork_locks_release(enum lock_rank lo, enum lock_rank hi, bool child);

/* ---- interleaving points (test builds only) ------------------------------------
 * INTERLEAVE("name") marks the place between two steps of a race the model
 * checks (docs/model.md, "Interleaving points"). It is nothing unless
 * USLAB_INTERLEAVE is defined, which only the uslab_interleave library of
 * tests/interleave is built with: there it calls the hook a test installed,
 * on the calling thread, so the test can stop that thread between the two
 * steps while another thread takes the racing one.
 */
#ifdef USLAB_INTERLEAVE
extern void (*uslab_interleave_hook)(const char *point);
#define INTERLEAVE(name)                                                                   \
	do {                                                                               \
		void (*hook_)(const char *) = READ_ONCE(uslab_interleave_hook);            \
		if (hook_)                                                                 \
			hook_(name);                                                       \
	} while (0)
#else
#define INTERLEAVE(name) ((void)0)
#endif

/* ---- the operating system (os.c) ------------------------------------------------ */
void *os_map(size_t size, size_t align, size_t skew, bool reserve);
void *os_map_aligned(size_t size, size_t align);   /* os_map, not reserved */
void *os_reserve(size_t size, size_t align);       /* read-only zeros, no memory */
bool os_reserve_at(void *p, size_t size);          /* ... at p, if it is free */
bool os_sanitized(void);   /* a sanitizer's runtime is in the process */
bool os_commit_fixed(void *p, size_t size);        /* part of a reservation: memory */
bool os_move_fixed(void *from, size_t size, void *to);   /* pages moved there */
void os_release_fixed(void *p, size_t size);       /* ... read-only zeros again */
void os_hugepage(void *p, size_t size, bool on);
void os_unmap(void *p, size_t size);
void os_decommit(void *p, size_t size);
void os_populate(void *p, size_t size);   /* best effort: fault in at once */
size_t os_page_size(void);
unsigned os_ncpus(void);   /* CPUs the process may run on, at least 1 */
uint64_t os_now_ms(void);
uint64_t os_random64(void);   /* from the kernel (getrandom); never 0 */

/* ---- AddressSanitizer in the program -------------------------------------------------
 * A program built with -fsanitize=address carries ASan's runtime, and with
 * it these two functions; a library not itself instrumented then marks the
 * memory of free cache objects poisoned, so that the program's reads and
 * writes of it are reported (the library's own, uninstrumented, are not).
 * The references are weak and of default visibility: resolved to the
 * program's runtime when there is one, else NULL. An instrumented build of
 * the library (the asan preset) checks its own accesses instead, and does
 * not poison. */
#if defined(__SANITIZE_ADDRESS__)
#define SAN_HOOKS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SAN_HOOKS 0
#endif
#endif
#ifndef SAN_HOOKS
#define SAN_HOOKS 1
void __asan_poison_memory_region(void const volatile *addr, size_t size)
	__attribute__((weak, visibility("default")));
void __asan_unpoison_memory_region(void const volatile *addr, size_t size)
	__attribute__((weak, visibility("default")));
#endif

static inline bool san_active(void)
{
#if SAN_HOOKS
	return __asan_poison_memory_region != NULL;
#else
	return false;
#endif
}

static inline void san_poison(const void *p, size_t n)
{
#if SAN_HOOKS
	if (san_active())
		__asan_poison_memory_region(p, n);
#else
	(void)p, (void)n;
#endif
}

static inline void san_unpoison(const void *p, size_t n)
{
#if SAN_HOOKS
	if (san_active())
		__asan_unpoison_memory_region(p, n);
#else
	(void)p, (void)n;
#endif
}

/* ---- valgrind's memcheck --------------------------------------------------------------
 * Built where valgrind's headers are: its client requests, a few
 * instructions that do nothing outside valgrind. vg_running() asks once
 * whether the program runs under memcheck (not merely valgrind: under
 * callgrind, say, the inline fast paths must stay what they are). */
#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define VG_HOOKS 1
#endif
#endif
#ifndef VG_HOOKS
#define VG_HOOKS 0
#endif

extern int vg_state;   /* platform.c: -1 not asked yet, else 0 or 1 */
bool vg_memcheck_probe(void);

static inline bool vg_running(void)
{
#if VG_HOOKS
	if (unlikely(READ_ONCE(vg_state) < 0))   /* racy first calls agree */
		WRITE_ONCE(vg_state, vg_memcheck_probe());
	return READ_ONCE(vg_state);
#else
	return false;
#endif
}

/* Memory that may serve anything next (a slab going back to its segment):
 * neither poisoned for ASan nor out of bounds for memcheck. */
static inline void mem_unwatch(void *p, size_t n)
{
	san_unpoison(p, n);
#if VG_HOOKS
	if (vg_running())
		VALGRIND_MAKE_MEM_UNDEFINED(p, n);
#endif
}

/* ---- threads -------------------------------------------------------------------- */

/* The process has never made a second thread (glibc's
 * __libc_single_threaded: it goes false, for good, before one starts);
 * false when the C library cannot say. */
static inline bool process_single_threaded(void)
{
#if USLAB_HAVE_SINGLE_THREADED
	return __libc_single_threaded;
#else
	return false;
#endif
}

/*
 * The calling thread's identity: the thread pointer, one %fs-relative
 * operand on x86-64 (no GOT load as for a TLS variable). Unique among live
 * threads; a new thread may reuse a dead one's (the layers that compare it
 * say why that is harmless for them).
 */
static inline uintptr_t thread_self(void)
{
#if defined(__has_builtin) && __has_builtin(__builtin_thread_pointer)
	return (uintptr_t)__builtin_thread_pointer();
#else
	extern __thread char thread_self_anchor;
	return (uintptr_t)&thread_self_anchor;   /* also unique per thread */
#endif
}

/* ---- deferred work ------------------------------------------------------------------
 * A signal handler may not take allocator locks; it sets deferred_pending,
 * and the next allocation slow path of any thread runs the work registered
 * for it (the statistics dump), outside every lock. */
extern int deferred_pending;
void deferred_register(void (*fn)(void));
void deferred_run(void);   /* slow paths, when deferred_pending */

/* Copy a C string into dst[size], truncated and always terminated. (Not
 * snprintf: the first cache setup of a short-lived program would fault in
 * libc's formatting code for it.) */
static inline void name_copy(char *dst, size_t size, const char *src)
{
	size_t i = 0;

	for (; i + 1 < size && src[i]; i++)
		dst[i] = src[i];
	dst[i] = 0;
}

#pragma GCC visibility pop

#endif /* USLAB_PLATFORM_H */
