/* SPDX-License-Identifier: MIT */
/*
 * malloc_cold_text - the library's cold code stays out of a process that
 * does not use it (allocator/cold-text.ld; docs/malloc.md, "Process
 * life").
 *
 *   layout     the preloaded library has two executable segments (the
 *              loader's program headers): the code every process runs, with
 *              malloc, and in a segment of its own the code of the
 *              statistics report, the profiler, the debug mode, validation
 *              and the unwinder, with the compiler's cold parts of every
 *              function - uslab_stats_print among them
 *   residency  a program that uses the malloc family in every way a program
 *              does (sizes from 1 byte to 12 MiB, calloc, realloc growing and
 *              shrinking, the aligned calls, frees by other threads, threads
 *              that exit and heaps reused, malloc_trim, malloc_usable_size)
 *              has none of the cold mapping's pages resident (smaps' Rss);
 *              then a statistics report brings some in, which shows that
 *              the check sees a touched page. Under an emulator (qemu-user),
 *              whose /proc/self/smaps is the host's and maps no guest code
 *              executable, this part is skipped (the test ends skipped).
 * Built without the script (a linker that does not take it, an unoptimised
 * build) or with the internal checks (whose walks are cold code), the test
 * is skipped (USLAB_TEST_NO_COLD_TEXT, set by tests/CMakeLists.txt).
 */
#define _GNU_SOURCE
#define USLAB_TEST_PRELOAD
#include "test.h"

#include <link.h>
#include <malloc.h>
#include <pthread.h>

#define THREADS 3
#define BLOCKS  2000

/* The library's executable segments, as the loader mapped them. */
struct text_segs {
	const char *lib;
	int n;
	uintptr_t lo[8], hi[8];
};

static int find_segs(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct text_segs *t = arg;
	char path[512];

	(void)size;
	if (!info->dlpi_name || !realpath(info->dlpi_name, path) || strcmp(path, t->lib))
		return 0;
	for (int i = 0; i < info->dlpi_phnum && t->n < 8; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
			t->lo[t->n] = info->dlpi_addr + ph->p_vaddr;
			t->hi[t->n++] = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
		}
	}
	return 1;
}

/* Which of t's segments holds p: its index, or -1. */
static int seg_of(const struct text_segs *t, const void *p)
{
	for (int i = 0; i < t->n; i++)
		if ((uintptr_t)p >= t->lo[i] && (uintptr_t)p < t->hi[i])
			return i;
	return -1;
}

static void *blocks[THREADS][BLOCKS];
static pthread_barrier_t phase;

static size_t size_at(uint64_t *seed)
{
	uint64_t r = test_rand(seed);

	switch (r % 8) {
	case 0: return 1 + r % 16;
	case 1: case 2: case 3: return 16 + r % 1024;
	case 4: case 5: return 1024 + r % 16384;
	case 6: return 16384 + r % (256 << 10);
	default: return (r % 64) ? 64 + r % 4096 : (1 << 20) + r % (8 << 20);
	}
}

/* Each thread fills its row with every kind of block, then frees the row
 * of the thread after it (frees by another thread), and exits. */
static void *worker(void *arg)
{
	int id = (int)(intptr_t)arg;
	uint64_t seed = 0x5eed + (uint64_t)id;

	for (int i = 0; i < BLOCKS; i++) {
		size_t n = size_at(&seed);
		void *p;

		switch (i % 6) {
		case 0: p = calloc(1, n); break;
		case 1: REQUIRE(!posix_memalign(&p, (size_t)64 << (i % 7), n)); break;
		case 2: p = aligned_alloc(256, (n + 255) & ~(size_t)255); break;
		case 3: p = realloc(malloc(n / 2 + 1), n); break;
		default: p = malloc(n); break;
		}
		REQUIRE(p);
		memset(p, id, n < 4096 ? n : 4096);
		CHECK(malloc_usable_size(p) >= n);
		blocks[id][i] = p;
	}
	/* growth in small steps and by doubling, then shrinking */
	char *g = NULL;
	for (size_t n = 16; n < (12 << 20); n += n / 3 + 24) {
		g = realloc(g, n);
		REQUIRE(g);
		g[n - 1] = 1;
	}
	g = realloc(g, 100);
	free(g);
	pthread_barrier_wait(&phase);
	for (int i = 0; i < BLOCKS; i++)
		free(blocks[(id + 1) % THREADS][i]);
	return NULL;
}

int main(void)
{
	Dl_info info;
	pthread_t th[THREADS];
	char lib[512];

	test_require_uslab();
	const char *none = getenv("USLAB_TEST_NO_COLD_TEXT");
	if (none) {
		test_skip("no cold mapping to look at: %s", none);
		return test_done("malloc_cold_text");
	}
	void *malloc_fn = dlsym(RTLD_DEFAULT, "uslab_malloc");
	void (*stats_print)(FILE *) = (void (*)(FILE *))dlsym(RTLD_DEFAULT, "uslab_stats_print");
	REQUIRE(malloc_fn && stats_print);
	REQUIRE(dladdr(malloc_fn, &info) && info.dli_fname && realpath(info.dli_fname, lib));

	/* layout: the cold code (the report's) in a segment of its own */
	struct text_segs segs = { .lib = lib };
	dl_iterate_phdr(find_segs, &segs);
	int hot = seg_of(&segs, malloc_fn), cold = seg_of(&segs, (void *)stats_print);
	printf("  %s: %d executable segments; malloc in %d, the report in %d\n", lib, segs.n,
	       hot, cold);
	CHECK_EQ(segs.n, 2);
	CHECK(hot >= 0 && cold >= 0 && hot != cold);

	/* residency */
	pthread_barrier_init(&phase, NULL, THREADS);
	for (int round = 0; round < 2; round++) {   /* the second: heaps reused */
		for (intptr_t i = 0; i < THREADS; i++)
			REQUIRE(!pthread_create(&th[i], NULL, worker, (void *)i));
		for (int i = 0; i < THREADS; i++)
			pthread_join(th[i], NULL);
	}
	malloc_trim(0);

	struct test_vma hot_map, cold_map;
	if (!test_vma_of((void *)stats_print, &cold_map) || !cold_map.exec) {
		test_skip("/proc/self/smaps shows no executable mapping of %s (an emulator?)", lib);
		return test_done("malloc_cold_text");
	}
	REQUIRE(test_vma_of(malloc_fn, &hot_map));
	printf("  after the work: the cold mapping's Rss %ld KiB\n", cold_map.rss_kb);
	CHECK(cold_map.start != hot_map.start);
	CHECK_EQ(cold_map.rss_kb, 0);

	FILE *null = fopen("/dev/null", "w");
	REQUIRE(null);
	stats_print(null);
	fclose(null);
	REQUIRE(test_vma_of((void *)stats_print, &cold_map));
	printf("  after a statistics report: %ld KiB\n", cold_map.rss_kb);
	CHECK(cold_map.rss_kb > 0);
	return test_done("malloc_cold_text");
}
