/* SPDX-License-Identifier: MIT */
/*
 * dwcas.h - double-width compare-and-swap of a 16-byte-aligned pair of words.
 *
 *   dword_t (16 bytes, 16-aligned)
 *  +--------------------+--------------------+
 *  |   lo (word 0)      |   hi (word 1)      |    e.g. slab: lo = freelist,
 *  +--------------------+--------------------+               hi = counters
 *
 * Two paths with identical signatures, chosen once per process:
 *   native  x86-64 `lock cmpxchg16b` when cpuid reports CX16; arm64 LSE
 *           `caspal` when HWCAP_ATOMICS is set, else an `ldaxp/stlxp` loop.
 *           Under ThreadSanitizer the native path is the compiler's 16-byte
 *           __atomic builtin, which TSan intercepts (no libatomic otherwise).
 *   locked  a striped table of ticket spinlocks keyed by address. Used when
 *           the CPU lacks the instruction, or when USLAB_DWCAS=0 is set.
 * The path is fixed by dwcas_init() (run lazily by the first dwcas) and never
 * changes while pairs are shared; dwcas_set_path() exists for tests and
 * benchmarks that switch between phases with no other thread running.
 *
 * Ordering contract:
 *   dwcas_try_cmpxchg  success: acquire + release (a full barrier on x86).
 *                      failure: *old receives the pair seen (acquire).
 *   dwcas_read         two relaxed single-word loads, lo then hi. The pair
 *                      may be torn; it is only a guess to feed a CAS, which
 *                      validates both halves at once. Use dwcas_read_stable()
 *                      when an untorn snapshot is needed.
 * Every writer of a shared pair must use dwcas_try_cmpxchg (never plain
 * stores) so that both paths see the same protocol.
 */
#ifndef USLAB_DWCAS_H
#define USLAB_DWCAS_H

#include "atomic.h"

typedef struct {
	uintptr_t lo, hi;
} __attribute__((aligned(16))) dword_t;

_Static_assert(sizeof(dword_t) == 2 * sizeof(void *), "dword_t is a pair of words");
_Static_assert(sizeof(void *) == 8, "uslab's dwcas assumes 64-bit words");

enum dwcas_path {
	DWCAS_UNSET = 0,
	DWCAS_LOCKED = 1,
	DWCAS_NATIVE = 2,
};

/* Set once by dwcas_init(); read on every dwcas. Not for direct use. */
extern int __dwcas_mode;

void dwcas_init(void);                        /* idempotent */
enum dwcas_path dwcas_path(void);             /* initialises if needed */
const char *dwcas_path_name(void);            /* "cmpxchg16b", "casp", "ldaxp/stlxp", "locked" */
bool dwcas_native_available(void);            /* the CPU has the instruction */
/* Tests/benchmarks only: no pair may be in concurrent use across the switch.
 * Returns false (path unchanged) if native is asked for but unavailable. */
bool dwcas_set_path(enum dwcas_path path);

bool __dwcas_slow(dword_t *p, dword_t *old, dword_t nw);   /* locked or uninitialised */

/* fork support: hold every stripe across fork(); release in the parent,
 * re-initialise in the child (child = true). */
void dwcas_lock_all(void);
void dwcas_unlock_all(bool child);

#if defined(__SANITIZE_THREAD__)
#define DWCAS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DWCAS_TSAN 1
#endif
#endif

#if defined(DWCAS_TSAN)
static inline bool __dwcas_native(dword_t *p, dword_t *old, dword_t nw)
{
	unsigned __int128 o = ((unsigned __int128)old->hi << 64) | old->lo;
	unsigned __int128 n = ((unsigned __int128)nw.hi << 64) | nw.lo;
	bool ok = __atomic_compare_exchange_n((unsigned __int128 *)p, &o, n, false,
					      __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	old->lo = (uintptr_t)o;
	old->hi = (uintptr_t)(o >> 64);
	return ok;
}
#elif defined(__x86_64__)
static inline bool __dwcas_native(dword_t *p, dword_t *old, dword_t nw)
{
	bool ok;

	__asm__ __volatile__("lock cmpxchg16b %[m]"
			     : "=@ccz"(ok), [m] "+m"(*p), "+a"(old->lo), "+d"(old->hi)
			     : "b"(nw.lo), "c"(nw.hi)
			     : "memory");
	return ok;
}
#elif defined(__aarch64__)
extern int __dwcas_lse;
static inline bool __dwcas_native(dword_t *p, dword_t *old, dword_t nw)
{
	uint64_t elo = old->lo, ehi = old->hi;

	if (__dwcas_lse) {
		register uint64_t x0 __asm__("x0") = elo;
		register uint64_t x1 __asm__("x1") = ehi;
		register uint64_t x2 __asm__("x2") = nw.lo;
		register uint64_t x3 __asm__("x3") = nw.hi;

		__asm__ __volatile__(".arch_extension lse\n\t"
				     "caspal %[a0], %[a1], %[n0], %[n1], %[m]"
				     : [a0] "+r"(x0), [a1] "+r"(x1), [m] "+Q"(*p)
				     : [n0] "r"(x2), [n1] "r"(x3)
				     : "memory");
		old->lo = x0;
		old->hi = x1;
		return x0 == elo && x1 == ehi;
	}
	uint64_t lo, hi;
	uint32_t fail;

	__asm__ __volatile__("1: ldaxp %[lo], %[hi], %[m]\n\t"
			     "cmp %[lo], %[elo]\n\t"
			     "ccmp %[hi], %[ehi], #0, eq\n\t"
			     "b.ne 2f\n\t"
			     "stlxp %w[f], %[nlo], %[nhi], %[m]\n\t"
			     "cbnz %w[f], 1b\n\t"
			     "b 3f\n"
			     /* mismatch: store back what we read to close the
			      * exclusive pair, which makes the 16-byte read atomic */
			     "2: stlxp %w[f], %[lo], %[hi], %[m]\n\t"
			     "cbnz %w[f], 1b\n"
			     "3:"
			     : [lo] "=&r"(lo), [hi] "=&r"(hi), [f] "=&r"(fail), [m] "+Q"(*p)
			     : [elo] "r"(elo), [ehi] "r"(ehi), [nlo] "r"((uint64_t)nw.lo),
			       [nhi] "r"((uint64_t)nw.hi)
			     : "cc", "memory");
	old->lo = lo;
	old->hi = hi;
	return lo == elo && hi == ehi;
}
#else
#define DWCAS_NO_NATIVE 1
static inline bool __dwcas_native(dword_t *p, dword_t *old, dword_t nw)
{
	return __dwcas_slow(p, old, nw);
}
#endif

/*
 * Compare *p with *old and, if both words match, store nw. Returns true on
 * success; on failure *old holds the pair that was seen.
 */
static inline bool dwcas_try_cmpxchg(dword_t *p, dword_t *old, dword_t nw)
{
	if (likely(READ_ONCE(__dwcas_mode) == DWCAS_NATIVE))
		return __dwcas_native(p, old, nw);
	return __dwcas_slow(p, old, nw);
}

/* Possibly-torn snapshot: a guess for the next dwcas_try_cmpxchg. */
static inline dword_t dwcas_read(const dword_t *p)
{
	dword_t v;

	v.lo = READ_ONCE(p->lo);
	v.hi = READ_ONCE(p->hi);
	return v;
}

/* Untorn snapshot (costs a locked instruction or a stripe lock). */
static inline dword_t dwcas_read_stable(dword_t *p)
{
	dword_t v = dwcas_read(p);

	while (!dwcas_try_cmpxchg(p, &v, v))
		;
	return v;
}

#endif /* USLAB_DWCAS_H */
