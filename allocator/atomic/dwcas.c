/* SPDX-License-Identifier: MIT */
/*
 * dwcas.c - path selection and the locked fallback of the double-width CAS.
 *
 * The locked path hashes the pair's address onto DWCAS_STRIPES ticket locks,
 * each on its own cache line. A writer holds the stripe while it compares and
 * stores both words; lockless readers (dwcas_read) see each word change
 * atomically and rely on the next CAS to validate the pair. The low word is
 * stored with release, as the native CAS would: a reader that loads it with
 * acquire outside the stripe (slab_take_freelist, before it walks the free
 * pointers of a chain it is about to take) sees what the writer wrote before
 * its CAS (the chain's links).
 */
#define _GNU_SOURCE
#include "dwcas.h"
#include "spinlock.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__aarch64__)
#include <sys/auxv.h>
#ifndef HWCAP_ATOMICS
#define HWCAP_ATOMICS (1 << 8)
#endif
#endif

#define DWCAS_STRIPES 64

/*
 * In .data, though zero: libuslab links this file after its big .bss arrays
 * (allocator/api/layout.c), so that the 4 KiB of stripes below, which nobody
 * touches while cmpxchg16b serves, come last; the small variables stay in
 * the page .data ends in, which the loader writes anyway.
 */
#define DWCAS_DATA __attribute__((section(".data")))

int __dwcas_mode DWCAS_DATA;
#if defined(__aarch64__)
int __dwcas_lse DWCAS_DATA;   /* read beside __dwcas_mode by every native dwcas */
#endif

static struct {
	spinlock_t lock;
	char pad[64 - sizeof(spinlock_t)];
} stripes[DWCAS_STRIPES] __attribute__((aligned(64)));

static inline spinlock_t *stripe_of(const void *p)
{
	uintptr_t a = (uintptr_t)p >> 4;

	a *= 0x9E3779B97F4A7C15ull;   /* Fibonacci hashing: neighbours spread out */
	return &stripes[a >> (64 - 6)].lock;
}
_Static_assert(DWCAS_STRIPES == 1 << 6, "stripe_of takes the top 6 bits");

bool dwcas_native_available(void)
{
#if defined(DWCAS_NO_NATIVE)
	return false;
#elif defined(__x86_64__)
	unsigned int a, b, c, d;

	if (!__get_cpuid(1, &a, &b, &c, &d))
		return false;
	return c & bit_CMPXCHG16B;
#elif defined(__aarch64__)
	return true;   /* ldaxp/stlxp is architectural on every arm64 */
#else
	return false;
#endif
}

/* USLAB_DWCAS=0 forces the locked path; getenv neither allocates nor locks. */
static bool env_forces_lock(void)
{
	const char *v = getenv("USLAB_DWCAS");

	return v && (strcmp(v, "0") == 0 || strcmp(v, "lock") == 0 || strcmp(v, "locked") == 0);
}

void dwcas_init(void)
{
	int mode;

	if (READ_ONCE(__dwcas_mode) != DWCAS_UNSET)
		return;
#if defined(__aarch64__)
	WRITE_ONCE(__dwcas_lse, (getauxval(AT_HWCAP) & HWCAP_ATOMICS) != 0);
#endif
	mode = (!env_forces_lock() && dwcas_native_available()) ? DWCAS_NATIVE : DWCAS_LOCKED;
	/* Racing initialisers compute the same answer; the first store wins. */
	int unset = DWCAS_UNSET;
	__atomic_compare_exchange_n(&__dwcas_mode, &unset, mode, false,
				    __ATOMIC_RELEASE, __ATOMIC_RELAXED);
}

enum dwcas_path dwcas_path(void)
{
	dwcas_init();
	return (enum dwcas_path)READ_ONCE(__dwcas_mode);
}

const char *dwcas_path_name(void)
{
	if (dwcas_path() == DWCAS_LOCKED)
		return "locked";
#if defined(DWCAS_TSAN)
	return "atomic128 (tsan)";
#elif defined(__x86_64__)
	return "cmpxchg16b";
#elif defined(__aarch64__)
	return __dwcas_lse ? "casp" : "ldaxp/stlxp";
#else
	return "locked";
#endif
}

bool dwcas_set_path(enum dwcas_path path)
{
	dwcas_init();
	if (path == DWCAS_NATIVE && !dwcas_native_available())
		return false;
	if (path != DWCAS_NATIVE && path != DWCAS_LOCKED)
		return false;
	WRITE_ONCE(__dwcas_mode, (int)path);
	return true;
}

static bool dwcas_locked(dword_t *p, dword_t *old, dword_t nw)
{
	spinlock_t *l = stripe_of(p);
	dword_t cur;
	bool ok;

	spin_lock(l);
	cur.lo = READ_ONCE(p->lo);
	cur.hi = READ_ONCE(p->hi);
	ok = cur.lo == old->lo && cur.hi == old->hi;
	if (ok) {
		smp_store_release(&p->lo, nw.lo);
		WRITE_ONCE(p->hi, nw.hi);
	} else {
		*old = cur;
	}
	spin_unlock(l);
	return ok;
}

bool __dwcas_slow(dword_t *p, dword_t *old, dword_t nw)
{
	int mode = READ_ONCE(__dwcas_mode);

	if (unlikely(mode == DWCAS_UNSET)) {
		dwcas_init();
		mode = READ_ONCE(__dwcas_mode);
	}
	if (mode == DWCAS_NATIVE)
		return __dwcas_native(p, old, nw);
	return dwcas_locked(p, old, nw);
}

/*
 * fork(): the stripes are taken only on the locked path. With cmpxchg16b
 * nobody takes them, and writing their page in prepare and again in both
 * processes afterwards would cost a page copy on each side of every fork
 * (a shell forks for each command): so the handlers skip them. The choice
 * is made in prepare, before the fork, and read (never written) after it.
 */
static bool stripes_held DWCAS_DATA;

void dwcas_lock_all(void)
{
	bool held = dwcas_path() != DWCAS_NATIVE;

	if (stripes_held != held)   /* no write at all in the usual case */
		stripes_held = held;
	if (!held)
		return;
	for (int i = 0; i < DWCAS_STRIPES; i++)
		spin_lock(&stripes[i].lock);
}

void dwcas_unlock_all(bool child)
{
	if (!stripes_held)
		return;
	for (int i = DWCAS_STRIPES - 1; i >= 0; i--)
		spin_unlock_fork(&stripes[i].lock, child);
}
