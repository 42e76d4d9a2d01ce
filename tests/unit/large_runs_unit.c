/* large_runs_unit - large blocks a thread frees and allocates again stay with
 * it, and realloc grows large blocks where they lie.
 *
 *   kept runs     a thread that frees a large block and asks for one no
 *                 bigger (and more than half of it) gets it back without
 *                 seg_lock and without a page fault - also a thread that
 *                 never made a small block (it had no heap before)
 *   joined runs   two neighbouring runs freed come back as one that serves
 *                 a block of both sizes, without seg_lock
 *   consumer      a thread that only frees large blocks others allocated
 *                 keeps none of them: they go back to their segment - also
 *                 one whose heap served a thread that kept runs
 *   realloc       a large block grown in small steps beside another growing
 *                 one moves a logarithmic number of times, keeping content;
 *                 a shrink by less than half stays in place with its units
 *   aligned runs  a block aligned to 32-256 KiB is a large run starting at
 *                 an aligned unit, not a huge mapping; above that, huge
 *   huge growth   a huge block grown in small steps resizes a logarithmic
 *                 number of times, keeping content; one shrunk by less
 *                 than half stays; one cut from a freed block's cached
 *                 range grows into the rest in place, without page faults
 *   descriptors   every segment's descriptors as segment.h says, after each
 */
#define _GNU_SOURCE
#include "test.h"
#include "kmalloc_check.h"
#include "uslab.h"

#include <pthread.h>
#include <sys/resource.h>

#define KiB 1024ul
#define MiB (1024ul * KiB)

static long thread_minflt(void)
{
	struct rusage ru;

	getrusage(RUSAGE_THREAD, &ru);
	return ru.ru_minflt;
}

static void touch(unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i += 4096)
		p[i] = (unsigned char)i;
	p[n - 1] = 1;
}

/* In a fresh thread (no small block ever): free a 512 KiB block, then 200
 * times allocate 256-512 KiB, write every page, free it. */
static void *kept_runs_thread(void *arg)
{
	long *result = arg;
	uint64_t seed = 42;
	unsigned char *p = uslab_malloc(512 * KiB);

	REQUIRE(p != NULL);
	touch(p, 512 * KiB);
	uslab_free(p);
	unsigned long locks = segment_lock_count();
	long flt = thread_minflt();
	for (int i = 0; i < 200; i++) {
		size_t n = 256 * KiB + test_rand(&seed) % (256 * KiB);
		unsigned char *q = uslab_malloc(n);

		REQUIRE(q != NULL);
		touch(q, n);
		uslab_free(q);
	}
	result[0] = (long)(segment_lock_count() - locks);
	result[1] = thread_minflt() - flt;
	return NULL;
}

static void test_kept_runs(void)
{
	long result[2];
	pthread_t t;

	REQUIRE(pthread_create(&t, NULL, kept_runs_thread, result) == 0);
	pthread_join(t, NULL);
	printf("kept runs: 200 cycles of 256-512 KiB took seg_lock %ld times, %ld page faults\n",
	       result[0], result[1]);
	CHECK_EQ(result[0], 0);
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
	/* the sanitizer's shadow of each page faults in as it is first touched */
#else
	CHECK(result[1] < 20);   /* the pages were the first block's */
#endif
	CHECK_EQ(kmalloc_validate_all(), 0);
}

/* Two neighbours freed serve one block of both. The runs this thread kept
 * before (the blocks it freed for test_recycled_heap_keeps_nothing) go back
 * first: none serves 256 KiB, so they would have spent its credit. */
static void test_joined_runs(void)
{
	uslab_trim();
	unsigned char *a = uslab_malloc(256 * KiB), *b = uslab_malloc(256 * KiB);

	REQUIRE(a && b);
	if (b != a + 256 * KiB) {
		test_skip("the two runs are not neighbours here");
		uslab_free(a);
		uslab_free(b);
		return;
	}
	uslab_free(b);
	uslab_free(a);
	unsigned long locks = segment_lock_count();
	unsigned char *c = uslab_malloc(512 * KiB);

	CHECK(c == a);
	CHECK_EQ(segment_lock_count() - locks, 0);
	CHECK_EQ(uslab_malloc_usable_size(c), 512 * KiB);
	CHECK_EQ(kmalloc_validate_all(), 0);
	/* and a run cut from a kept one: the rest stays kept */
	uslab_free(c);
	locks = segment_lock_count();
	unsigned char *d = uslab_malloc(300 * KiB), *e = uslab_malloc(200 * KiB);
	CHECK(d == a && e == a + round_up(300 * KiB, UNIT_SIZE));
	CHECK_EQ(segment_lock_count() - locks, 0);
	test_fill(d, 300 * KiB);
	test_fill(e, 200 * KiB);
	CHECK_EQ(kmalloc_validate_all(), 0);
	CHECK(test_intact(d, 300 * KiB) && test_intact(e, 200 * KiB));
	uslab_free(d);
	uslab_free(e);
	CHECK_EQ(kmalloc_validate_all(), 0);
}

enum { HANDED = 8 };
static void *handed[HANDED];

static void *consumer(void *arg)
{
	(void)arg;
	uslab_free(uslab_malloc(64));   /* it has a heap, as a real consumer does */
	for (int i = 0; i < HANDED; i++)
		uslab_free(handed[i]);
	for (int i = 0; i < HANDED; i++)   /* back in the segment: free and dirty */
		CHECK_EQ(segment_unit_state(handed[i]), 1);
	return NULL;
}

/* handed[]: blocks the main thread allocates, for a consumer to free */
static void hand_blocks(void)
{
	for (int i = 0; i < HANDED; i++) {
		handed[i] = uslab_malloc(144 * KiB + (size_t)i * 16 * KiB);
		REQUIRE(handed[i] != NULL);
		touch(handed[i], 144 * KiB);
	}
}

static void run_consumer(void)
{
	pthread_t t;

	REQUIRE(pthread_create(&t, NULL, consumer, NULL) == 0);
	pthread_join(t, NULL);
	CHECK_EQ(kmalloc_validate_all(), 0);
}

static void test_consumer_keeps_nothing(void)
{
	hand_blocks();
	run_consumer();
}

/* A thread that allocates large blocks, earning the credit to keep as many
 * runs, and exits without freeing them. */
static void *large_user(void *arg)
{
	void **blocks = arg;

	for (int i = 0; i < HANDED; i++)
		blocks[i] = uslab_malloc(144 * KiB);
	return NULL;
}

/* The consumer's heap is the exited thread's (the only heap not live: the
 * main thread made its own first, for the blocks it hands over); the
 * credit stays with the thread that earned it. Run first, while no other
 * thread has exited. */
static void test_recycled_heap_keeps_nothing(void)
{
	void *blocks[HANDED];
	pthread_t t;

	hand_blocks();
	REQUIRE(pthread_create(&t, NULL, large_user, blocks) == 0);
	pthread_join(t, NULL);
	run_consumer();
	for (int i = 0; i < HANDED; i++)
		uslab_free(blocks[i]);
}

/* Four buffers grown in turn by 1-2 KiB steps from 40 KiB to 1.5 MiB, with
 * a 32 KiB block made (and an older one freed) between rounds: without room
 * to grow, each would move whenever another block took the units after it. */
enum { BUFS = 4, OTHERS = 8 };

static void test_realloc_grow(void)
{
	unsigned char *p[BUFS], *other[OTHERS] = { NULL };
	size_t n[BUFS];
	unsigned moves[BUFS] = { 0 }, most = 0, round = 0;
	uint64_t seed = 7;

	for (int k = 0; k < BUFS; k++) {
		n[k] = 40 * KiB;
		p[k] = uslab_malloc(n[k]);
		REQUIRE(p[k] != NULL);
		test_fill_seed(p[k], n[k], (uint64_t)k + 11);
	}
	while (n[BUFS - 1] < 1536 * KiB) {
		for (int k = 0; k < BUFS; k++) {
			size_t m = n[k] + KiB + test_rand(&seed) % KiB;
			unsigned char *q = uslab_realloc(p[k], m);

			REQUIRE(q != NULL);
			moves[k] += q != p[k];
			if (q != p[k] && !test_intact_seed(q, n[k], (uint64_t)k + 11)) {
				fprintf(stderr, "realloc lost content growing %zu -> %zu\n", n[k], m);
				test_failures++;
			}
			p[k] = q;
			n[k] = m;
			test_fill_seed(q, m, (uint64_t)k + 11);
		}
		unsigned o = round++ % OTHERS;
		uslab_free(other[o]);
		other[o] = uslab_malloc(32 * KiB);
		REQUIRE(other[o] != NULL);
	}
	for (int k = 0; k < BUFS; k++)
		most = moves[k] > most ? moves[k] : most;
	printf("realloc: %d buffers grown 40 KiB -> 1.5 MiB in 1-2 KiB steps, other blocks "
	       "made between: at most %u moves\n", BUFS, most);
	/* log2(1.5 MiB / 40 KiB) = 5.3; the first growth moves a block out
	 * of its class (40 KiB) into a run, not into the next class */
	CHECK(most <= 8);
	CHECK_EQ(kmalloc_validate_all(), 0);

	/* a shrink by less than half stays, with its units */
	size_t have = uslab_malloc_usable_size(p[0]);
	CHECK(uslab_realloc(p[0], have * 3 / 4) == p[0]);
	CHECK_EQ(uslab_malloc_usable_size(p[0]), have);
	/* by more: in place, the tail goes back */
	CHECK(uslab_realloc(p[0], have / 4) == p[0]);
	CHECK_EQ(uslab_malloc_usable_size(p[0]), round_up(have / 4, UNIT_SIZE));
	CHECK(test_intact_seed(p[0], have / 4, 11));
	CHECK_EQ(kmalloc_validate_all(), 0);
	for (int k = 0; k < BUFS; k++)
		uslab_free(p[k]);
	for (int o = 0; o < OTHERS; o++)
		uslab_free(other[o]);
	CHECK_EQ(kmalloc_validate_all(), 0);
}

/* A block realloc grows past LARGE_MIN leaves the classes for a large
 * run, which grows in place from then on; one malloc'd at that size is a
 * class's object, one calloc'd a run. A run that shrinks below LARGE_MIN
 * goes back to a class. */
static void test_grow_into_run(void)
{
	unsigned char *p = uslab_malloc(20 * KiB), *q, *r;
	void *c;

	REQUIRE(p != NULL);
	test_fill_seed(p, 20 * KiB, 5);
	q = uslab_realloc(p, LARGE_MIN + 1);
	REQUIRE(q != NULL);
	CHECK(ptr_to_slab(q) && ptr_to_slab(q)->kind == SLAB_KIND_LARGE &&
	      ptr_to_slab(q)->base == (uintptr_t)q);
	CHECK(test_intact_seed(q, 20 * KiB, 5));
	test_fill_seed(q, LARGE_MIN + 1, 6);
	c = uslab_malloc(LARGE_MIN + 1);
	REQUIRE(c != NULL);
	CHECK(!ptr_to_slab(c) || ptr_to_slab(c)->kind == SLAB_KIND_SLAB);
	uslab_free(c);
	/* calloc at that size: a run too, zero (its memory reused or not) */
	for (int i = 0; i < 2; i++) {
		unsigned char *z = uslab_calloc(1, LARGE_MIN + 1);

		REQUIRE(z != NULL);
		CHECK(ptr_to_slab(z) && ptr_to_slab(z)->kind == SLAB_KIND_LARGE);
		CHECK(test_all_zero(z, LARGE_MIN + 1));
		memset(z, 0x5a, LARGE_MIN + 1);   /* the second round reuses it */
		uslab_free(z);
	}
	/* in place while the units after it are free (its own: one unit more) */
	r = uslab_realloc(q, LARGE_MIN + UNIT_SIZE);
	if (r == q)
		CHECK_EQ(ptr_to_slab(q)->nunits, 3);
	REQUIRE(r != NULL);
	CHECK(test_intact_seed(r, LARGE_MIN + 1, 6));
	q = uslab_realloc(r, 8 * KiB);
	REQUIRE(q != NULL);
	CHECK(q != r && (!ptr_to_slab(q) || ptr_to_slab(q)->kind == SLAB_KIND_SLAB));
	CHECK(test_intact_seed(q, 8 * KiB, 6));
	uslab_free(q);
	CHECK_EQ(kmalloc_validate_all(), 0);
}

/* Eight slots of blocks aligned to 32, 64, 128 and 256 KiB, 1-4 times the
 * alignment, replaced at random 400 times: each a large run at an aligned
 * unit (none a huge block), written whole; a 512 KiB alignment is a huge
 * block's. */
static void test_aligned_runs(void)
{
	unsigned char *slot[8] = { NULL };
	size_t huge = kmalloc_huge_count();
	uint64_t seed = 9;

	for (int i = 0; i < 400; i++) {
		unsigned k = (unsigned)(test_rand(&seed) % 8);
		size_t align = (32 * KiB) << (test_rand(&seed) % 4);
		size_t n = align * (1 + test_rand(&seed) % 4) - test_rand(&seed) % 100;
		unsigned char *p;

		uslab_free(slot[k]);
		slot[k] = p = uslab_aligned_alloc(align, n);
		REQUIRE(p != NULL);
		struct slab *run = ptr_to_slab(p);

		if (((uintptr_t)p & (align - 1)) || !run || run->kind != SLAB_KIND_LARGE ||
		    run->base != (uintptr_t)p || uslab_malloc_usable_size(p) < n) {
			fprintf(stderr, "aligned_alloc(%zu, %zu) = %p: not an aligned run\n", align, n,
				(void *)p);
			test_failures++;
		}
		memset(p, (int)i, n);
	}
	CHECK_EQ(kmalloc_huge_count(), huge);
	unsigned char *big = uslab_aligned_alloc(512 * KiB, 100 * KiB);

	REQUIRE(big != NULL);
	CHECK(((uintptr_t)big & (512 * KiB - 1)) == 0 && !ptr_to_slab(big));
	CHECK_EQ(kmalloc_huge_count(), huge + 1);
	uslab_free(big);
	for (int k = 0; k < 8; k++)
		uslab_free(slot[k]);
	CHECK_EQ(kmalloc_validate_all(), 0);
}

static unsigned char byte_at(size_t i)
{
	return (unsigned char)((i * 2654435761u) >> 24);
}

/* Grown from 3 to 24 MiB in steps of 4-5 KiB (each crosses a page): the
 * usable size changes a logarithmic number of times (a quarter more each
 * time); before, each step was an mremap. Then the block is freed and a
 * smaller one cut from its cached range grows in place into the rest, whose
 * pages it wrote already. */
static void test_huge_step_growth(void)
{
	long decay = 60000, old_decay;   /* the cached range must not age out */
	size_t n = 3 * MiB, usable = 0;
	unsigned resizes = 0;
	uint64_t seed = 3;
	unsigned char *p = uslab_malloc(n), *q;

	REQUIRE(p != NULL);
	CHECK_EQ(uslab_ctl("decay_ms", &old_decay, &decay), 0);
	for (size_t i = 0; i < n; i++)
		p[i] = byte_at(i);
	while (n < 24 * MiB) {
		size_t m = n + 4 * KiB + test_rand(&seed) % KiB;

		q = uslab_realloc(p, m);
		REQUIRE(q != NULL);
		p = q;
		for (size_t i = n; i < m; i++)
			p[i] = byte_at(i);
		n = m;
		resizes += uslab_malloc_usable_size(p) != usable;
		usable = uslab_malloc_usable_size(p);
	}
	size_t bad = n;
	for (size_t i = 0; i < n && bad == n; i++)
		bad = p[i] == byte_at(i) ? n : i;
	if (bad != n) {
		fprintf(stderr, "huge growth lost content at byte %zu of %zu\n", bad, n);
		test_failures++;
	}
	printf("huge growth: 3 -> 24 MiB in 4-5 KiB steps, %u resizes\n", resizes);
	/* log(8) / log(1.25) = 9.3 */
	CHECK(resizes <= 12);
	/* a shrink by less than half stays where it is */
	CHECK(uslab_realloc(p, usable * 3 / 4) == p);
	CHECK_EQ(uslab_malloc_usable_size(p), usable);

	uslab_free(p);   /* its range cached, every page but the slack's written */
	q = uslab_malloc(4 * MiB);
	REQUIRE(q != NULL);
	CHECK(q == p);   /* the head of that range */
	long flt = thread_minflt();
	unsigned char *r = uslab_realloc(q, 12 * MiB);
	REQUIRE(r != NULL);
	CHECK(r == q);
	touch(r, 12 * MiB);
	flt = thread_minflt() - flt;
	printf("huge growth into the cached range: %ld page faults for 8 MiB\n", flt);
	CHECK(flt < 64);
	uslab_free(r);
	CHECK_EQ(uslab_ctl("decay_ms", NULL, &old_decay), 0);
	CHECK_EQ(kmalloc_validate_all(), 0);
}

int main(void)
{
	test_recycled_heap_keeps_nothing();
	test_kept_runs();
	test_joined_runs();
	test_consumer_keeps_nothing();
	test_realloc_grow();
	test_grow_into_run();
	test_aligned_runs();
	test_huge_step_growth();
	return test_done("large_runs_unit");
}
