/* SPDX-License-Identifier: MIT */
/*
 * os.c - the platform below uslab: aligned mappings, unmapping, decommit.
 * Nothing here allocates or takes a lock.
 */
#define _GNU_SOURCE
#include "platform.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

size_t os_page_size(void)
{
	static size_t page;

	if (!READ_ONCE(page))
		WRITE_ONCE(page, (size_t)sysconf(_SC_PAGESIZE));
	return READ_ONCE(page);
}

/*
 * The CPUs this process may run on (its affinity mask, as the kernel has
 * it at the first call); at least 1. By the system call itself: libc's
 * sched_getaffinity and CPU_COUNT live in a part of its code that most
 * programs never run, and the first call would map 64 KiB of it into the
 * process (the kernel maps the pages around a faulting one), where
 * syscall() sits beside mmap, which every process runs.
 */
unsigned os_ncpus(void)
{
	static unsigned n;

	if (!READ_ONCE(n)) {
		unsigned long mask[1024 / (8 * sizeof(long))];
		long bytes = syscall(SYS_sched_getaffinity, 0, sizeof(mask), mask);
		unsigned k = 0;

		/* the kernel writes its mask's size, <= ours, and leaves the rest */
		for (long i = 0; i < bytes / (long)sizeof(long); i++)
			k += (unsigned)__builtin_popcountl(mask[i]);
		WRITE_ONCE(n, k ? k : 1);
	}
	return READ_ONCE(n);
}

/*
 * Map size bytes starting skew bytes past an align boundary (align a power
 * of two >= the page size, skew < align and page-aligned): map
 * size + align - page (mmap's result is page-aligned, so the first such
 * start at or above it lies within), then trim the head and the tail.
 * prot and flags (besides private and anonymous) as mmap takes them.
 * Returns NULL with errno = ENOMEM on failure.
 */
static void *map_aligned(size_t size, size_t align, size_t skew, int prot, int flags)
{
	size_t len = size + align - os_page_size();
	uintptr_t p, q;
	void *m;

	if (len < size) {
		errno = ENOMEM;
		return NULL;
	}
	m = mmap(NULL, len, prot, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
	if (m == MAP_FAILED) {
		errno = ENOMEM;
		return NULL;
	}
	p = (uintptr_t)m;
	q = round_up(p - skew, align) + skew;   /* modulo 2^64: p <= q <= p + align - page */
	if (q > p)
		munmap(m, q - p);
	if (p + len > q + size)
		munmap((void *)(q + size), (p + len) - (q + size));
	return (void *)q;
}

/* Memory so; reserve: count the mapping against the overcommit limit (huge
 * blocks, so that a request the system cannot back fails as under glibc);
 * segments and metadata are mapped MAP_NORESERVE. */
void *os_map(size_t size, size_t align, size_t skew, bool reserve)
{
	return map_aligned(size, align, skew, PROT_READ | PROT_WRITE, reserve ? 0 : MAP_NORESERVE);
}

void *os_map_aligned(size_t size, size_t align)
{
	return os_map(size, align, 0, false);
}

/*
 * Address space, size bytes aligned to align, that reads as zero and holds
 * no memory: read-only, so that no overcommit accounting applies to it
 * (only writable private mappings are counted), and left out of core
 * dumps (it would make them terabytes long, if sparse). os_commit_fixed
 * makes a part of it writable memory, dumped; os_release_fixed makes that
 * part read-only zeros again. NULL with errno = ENOMEM when the system
 * refuses.
 */
void *os_reserve(size_t size, size_t align)
{
	void *p = map_aligned(size, align, 0, PROT_READ, MAP_NORESERVE);

	if (p)
		madvise(p, size, MADV_DONTDUMP);
	return p;
}

/*
 * A sanitizer's runtime in the process - the library's own build's, or the
 * program's (weak references, resolved when it carries one) - keeps its own
 * map of the address space, which an address asked for may lie outside:
 * ASan's on aarch64 ends at 4 TiB under some address space sizes (its
 * checks then fail on our blocks), TSan's mmap turns such a hint into 0
 * and ends the process. The kernel's own choices lie inside.
 */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
	__has_feature(memory_sanitizer) || __has_feature(hwaddress_sanitizer)
#define SANITIZED_BUILD 1
#endif
#endif
#ifndef SANITIZED_BUILD
#define SANITIZED_BUILD 0
void __asan_init(void) __attribute__((weak, visibility("default")));
void __tsan_init(void) __attribute__((weak, visibility("default")));
void __msan_init(void) __attribute__((weak, visibility("default")));
void __hwasan_init(void) __attribute__((weak, visibility("default")));
#endif

bool os_sanitized(void)
{
#if SANITIZED_BUILD
	return true;
#else
	return __asan_init || __tsan_init || __msan_init || __hwasan_init;
#endif
}

/* The same at p exactly, if nothing is mapped there; false if not. */
bool os_reserve_at(void *p, size_t size)
{
	void *m = mmap(p, size, PROT_READ,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);

	if (m == MAP_FAILED)
		return false;
	if (m != p) {   /* a kernel before 4.17 takes the flag for a hint */
		munmap(m, size);
		return false;
	}
	madvise(p, size, MADV_DONTDUMP);
	return true;
}

/* The pages of [from, from + size) moved to to, over what was mapped
 * there (a part of a reservation); false if the kernel refused. */
bool os_move_fixed(void *from, size_t size, void *to)
{
	return mremap(from, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, to) == to;
}

bool os_commit_fixed(void *p, size_t size)
{
	return mmap(p, size, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == p;
}

/* The pages go back at once; on failure (the kernel could not split the
 * mapping) the range stays writable, its pages given back all the same. */
void os_release_fixed(void *p, size_t size)
{
	if (mmap(p, size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
		 -1, 0) == p)
		madvise(p, size, MADV_DONTDUMP);
	else
		madvise(p, size, MADV_DONTNEED);
}

void os_unmap(void *p, size_t size)
{
	munmap(p, size);
}

/*
 * Give the pages back but keep the range mapped; they read as zero again.
 * Callers pass whole units (16 KiB), and a kernel's page may be larger
 * (arm64 kernels with 64 KiB pages): madvise would refuse a range starting
 * inside a page, and round a length up past the range onto neighbouring
 * units still in use. So only the whole pages inside the range go back;
 * the range's share of a page it has in common with its neighbours is
 * zeroed in place.
 */
void os_decommit(void *p, size_t size)
{
	size_t page = os_page_size();
	uintptr_t start = (uintptr_t)p, end = start + size;
	uintptr_t lo = round_up(start, page), hi = end & ~(uintptr_t)(page - 1);

	if (lo >= hi) {
		memset(p, 0, size);
		return;
	}
	if (lo > start)
		memset(p, 0, lo - start);
	if (end > hi)
		memset((void *)hi, 0, end - hi);
	madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/*
 * Fault in a range about to be written in full, with one system call: a
 * page costs less to write after MADV_POPULATE_WRITE than after a fault of
 * its own (docs/slab.md has the measurement). Best effort: a kernel
 * without it (before 5.14) says EINVAL once and the pages fault as before.
 */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
void os_populate(void *p, size_t size)
{
	static int unsupported;

	if (READ_ONCE(unsupported))
		return;
	if (madvise(p, size, MADV_POPULATE_WRITE) != 0 && errno == EINVAL)
		WRITE_ONCE(unsupported, 1);
}

/*
 * Ask for (on) or against transparent huge pages over [p, p + size), page
 * aligned. Under the kernel's THP mode "madvise" (Debian's default) only
 * ranges asked for get them, and only over whole aligned 2 MiB pages
 * inside the range: one fault and one zeroing per 2 MiB instead of 512.
 * The flag is per mapping (VMA): over a whole mapping it splits nothing.
 * Best effort: without THP it does nothing.
 */
void os_hugepage(void *p, size_t size, bool on)
{
	madvise(p, size, on ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
}

/* A cheap clock for decay decisions (the vDSO's coarse monotonic clock). */
uint64_t os_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* 64 random bits from the kernel, never 0. Without getrandom (a kernel older
 * than 3.17, or a seccomp filter), the clock and an address: weaker, but
 * still different from run to run and process to process. */
uint64_t os_random64(void)
{
	uint64_t r = 0;
	struct timespec ts;

	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		r = ((uint64_t)ts.tv_nsec << 32 ^ (uint64_t)ts.tv_sec ^ (uintptr_t)&ts) *
		    0x9e3779b97f4a7c15ull;
		r ^= (uint64_t)getpid() << 17;
	}
	return r ? r : 0x9e3779b97f4a7c15ull;
}
