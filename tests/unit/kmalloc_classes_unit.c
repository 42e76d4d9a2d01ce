/* kmalloc_classes_unit - size_class() against a slow obvious model, and the
 * class table's promises (waste, alignment, cpu-slab offsets); first, the
 * start-up classes (power-of-two classes for a process's first blocks) in a
 * running allocator, and what ends them (a class's second slab). */
#include "test.h"
#include "kmalloc.h"
#include "uslab.h"

#include <sys/wait.h>
#include <unistd.h>

/* The model: the first class whose size holds n. */
static unsigned model_class(size_t n)
{
	for (unsigned c = 0; c < NR_CLASSES; c++)
		if (kmalloc_class_size[c] >= n)
			return c;
	return NR_CLASSES;
}

/* The start-up class of a request: the first power of two >= max(n, 16). */
static size_t startup_size(size_t n)
{
	size_t p = 16;

	while (p < n)
		p <<= 1;
	return p;
}

/* In use (uslab_malloc, this process's first allocations): a request whose
 * fine class is not set up gets its start-up class; aligned requests keep
 * their alignment; the first class to need a second slab ends it, and
 * requests get their fine classes from then on. */
static void check_startup_classes(void)
{
	static const size_t sizes[] = { 1, 8, 24, 40, 100, 200, 300, 700, 1100, 1500,
					3000, 5000, 9000, 17000, 30000 };
	enum { NS = sizeof(sizes) / sizeof(sizes[0]) };
	void *blocks[NS], *keep[4096];
	size_t n = 0;

	CHECK(kmalloc_startup);
	for (size_t i = 0; i < NS; i++) {
		blocks[i] = uslab_malloc(sizes[i]);
		REQUIRE(blocks[i]);
		CHECK_EQ(uslab_malloc_usable_size(blocks[i]), startup_size(sizes[i]));
	}
	void *a = uslab_memalign(32, 40);   /* class 48, not a multiple of 32: 64 */
	CHECK(a && (uintptr_t)a % 32 == 0);
	CHECK_EQ(uslab_malloc_usable_size(a), 64);
	uslab_free(a);

	/* 40-byte requests fill the 64-byte start-up class's first slab; the
	 * one that needs its second slab ends the start-up classes */
	while (kmalloc_startup && n < 4096) {
		keep[n] = uslab_malloc(40);
		REQUIRE(keep[n]);
		CHECK_EQ(uslab_malloc_usable_size(keep[n]), 64);
		n++;
	}
	CHECK(!kmalloc_startup);
	CHECK(n <= kmalloc_cache(size_class(64))->objects);
	void *p = uslab_malloc(40);
	CHECK_EQ(uslab_malloc_usable_size(p), 48);
	uslab_free(p);
	p = uslab_malloc(1100);
	CHECK_EQ(uslab_malloc_usable_size(p), 1152);
	uslab_free(p);
	for (size_t i = 0; i < n; i++)
		uslab_free(keep[i]);
	for (size_t i = 0; i < NS; i++)
		uslab_free(blocks[i]);
}

/* A program that only ever allocates and frees one block of a size whose
 * class is not set up never needs a second slab; the start-up classes end
 * after a bounded number of such requests anyway (each one takes the slow
 * path while they last). In a child, so the parent's are left as they are. */
static void check_startup_bounded(void)
{
	pid_t pid = fork();
	int status;

	REQUIRE(pid >= 0);
	if (pid == 0) {
		long n = 0;

		while (kmalloc_startup && n < 100000) {
			void *p = uslab_malloc(40);   /* class 48 B, start-up class 64 B */
			/* 48 only from the request that ends them */
			if (!p || uslab_malloc_usable_size(p) != (kmalloc_startup ? 64u : 48u))
				_exit(2);
			uslab_free(p);
			n++;
		}
		void *p = uslab_malloc(40);
		_exit(kmalloc_startup || n > 5000 || uslab_malloc_usable_size(p) != 48 ? 1 : 0);
	}
	REQUIRE(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status));
	CHECK_EQ(WEXITSTATUS(status), 0);
}

int main(void)
{
	check_startup_bounded();
	check_startup_classes();

	CHECK_EQ(kmalloc_class_size[NR_CLASSES - 1], SMALL_MAX);
	for (unsigned c = 1; c < NR_CLASSES; c++)
		CHECK(kmalloc_class_size[c] > kmalloc_class_size[c - 1]);
	/* every block 16-aligned and with a second word (the double-free mark) */
	for (unsigned c = 0; c < NR_CLASSES; c++)
		CHECK_EQ(kmalloc_class_size[c] % 16, 0);

	for (size_t n = 1; n <= SMALL_MAX; n++) {
		unsigned c = size_class(n), m = model_class(n);
		if (c != m) {
			fprintf(stderr, "size_class(%zu) = %u, model says %u\n", n, c, m);
			test_failures++;
			break;
		}
		size_t sz = kmalloc_class_size[c];
		/* at most 25 % of the block is waste above 128 bytes */
		if (n > 128)
			CHECK((sz - n) * 4 <= sz);
		/* objects of class c are aligned to min(16, largest pow2 <= n) */
		size_t want = 16;
		while (want > n)
			want >>= 1;
		CHECK(sz % want == 0);
	}
	CHECK_EQ(size_class(0), 0);
	/* the caches' storage: a permutation, the start-up classes (every
	 * power of two from 16 on) first in size order, right after the
	 * "set up" word (no page alignment since layout.c: the ten first
	 * start-up classes and the word span at most two pages) */
	CHECK((uintptr_t)&kmalloc_store[0] - (uintptr_t)&kmalloc_statics.ready <= CACHE_LINE);
	CHECK((uintptr_t)&kmalloc_store[10] <= (uintptr_t)&kmalloc_statics + 4096);
	unsigned startup_seen = 0;
	for (unsigned c = 0; c < NR_CLASSES; c++) {
		size_t sz = kmalloc_class_size[c];
		bool startup = sz >= 16 && (sz & (sz - 1)) == 0;

		CHECK(kmalloc_slot[c] < NR_CLASSES);
		CHECK_EQ(kmalloc_slot_class[kmalloc_slot[c]], c);
		CHECK(kmalloc_class_of(kmalloc_cache(c)) == c);
		if (startup)
			CHECK_EQ(kmalloc_slot[c], startup_seen++);
		else
			CHECK(kmalloc_slot[c] >= NR_STARTUP_CLASSES);
	}
	CHECK_EQ(startup_seen, NR_STARTUP_CLASSES);
	/* a heap's rows of the start-up classes (and its runs, messages,
	 * every kmalloc outbox and inbox) lie in one page of it */
	size_t first = offsetof(struct thread_heap, runs);
	size_t last = offsetof(struct thread_heap, k_stat[NR_STARTUP_CLASSES]) - 1;
	CHECK_EQ(first / 4096, last / 4096);
	CHECK(offsetof(struct thread_heap, k_inbox) < last);
	/* the malloc fast path's table: offsets of the class's cpu slab */
	CHECK_EQ(kmalloc_small_off[0], 0);
	for (size_t n = 1; n <= 1024; n++)
		CHECK_EQ(kmalloc_small_off[n],
			 model_class(n) * sizeof(struct cpu_slab));
	return test_done("kmalloc_classes_unit");
}
