/*
 * shared_refill_unit - with many more threads than CPUs, a thread's refills
 * of a malloc class take a few objects of slabs that stay shared
 * (cache/cpu.c, "Shared refills"); at or below the bound it owns slabs.
 * shared_threads_over sets the bound the tests need.
 *
 *   shared        a block's slab stays unfrozen on the partial list, owned
 *                 by nobody, and the thread holds no slab; another thread's
 *                 next block of the class comes from the same slab
 *   still shared  after 40 refills of a class the thread still holds no
 *                 slab of it, and none of the slabs its blocks came from
 *                 is frozen; once the process is at the bound again, the
 *                 same thread's next refill freezes a slab for it
 *   not frozen    a free into a FULL shared slab by a thread that shares
 *                 lists the slab again instead of freezing it for itself
 *   consumer      a thread that frees blocks of a class it never allocated
 *                 keeps at most a few of them on its freelist
 *   few threads   at or below the bound, a thread's refill owns its slab
 */
#include "test.h"
#include "kmalloc_check.h"
#include "uslab.h"

#include <pthread.h>

#define SIZE   64
#define FEW    16            /* objects of a shared refill of 64-byte blocks */
#define BLOCKS 700           /* FEW x 40 and more */

static void *blocks[BLOCKS];
static struct uslab_cache *cls;   /* their class */

static struct uslab_cache *class_of(void *p)
{
	return ptr_to_slab(p)->cache;
}

static bool slab_frozen(void *p)
{
	return ctr_frozen(dwcas_read_stable(&ptr_to_slab(p)->xword).hi);
}

static unsigned chain_len(const struct uslab_cache *c, void *p)
{
	unsigned n = 0;

	for (; p && n < 100000; p = fp_get(c, p))
		n++;
	return n;
}

static void *run(void *(*fn)(void *), void *arg)
{
	pthread_t t;
	void *ret;

	REQUIRE(pthread_create(&t, NULL, fn, arg) == 0);
	pthread_join(t, &ret);
	return ret;
}

static void *alloc_one(void *arg)
{
	(void)arg;
	return uslab_malloc(SIZE);
}

static void test_shared(void)
{
	blocks[0] = uslab_malloc(SIZE);
	REQUIRE(blocks[0] != NULL);
	struct uslab_cache *s = cls = class_of(blocks[0]);

	CHECK(!slab_frozen(blocks[0]));
	CHECK(ptr_to_slab(blocks[0])->on_partial);
	CHECK(ptr_to_slab(blocks[0])->owner == NULL);
	CHECK(this_cpu_slab(s)->slab == NULL);
	CHECK_EQ(chain_len(s, this_cpu_slab(s)->freelist), FEW - 1);
	void *other = run(alloc_one, NULL);

	REQUIRE(other != NULL);
	CHECK(ptr_to_slab(other) == ptr_to_slab(blocks[0]));
	uslab_free(other);
	CHECK_EQ(kmalloc_validate_all(), 0);
}

static void *owned[FEW + 1];

static void test_still_shared(void)
{
	struct uslab_cache *s = cls;
	int frozen = 0;

	for (int i = 1; i < BLOCKS; i++)
		REQUIRE((blocks[i] = uslab_malloc(SIZE)) != NULL);
	CHECK(this_cpu_slab(s)->slab == NULL);
	for (int i = 0; i < BLOCKS; i++)
		frozen += slab_frozen(blocks[i]);
	CHECK_EQ(frozen, 0);
	CHECK_EQ(kmalloc_validate_all(), 0);

	/* no longer too many threads: the rest of the shared refill first,
	 * then a slab of its own */
	shared_threads_over = 1000;
	for (int i = 0; i <= FEW; i++)
		REQUIRE((owned[i] = uslab_malloc(SIZE)) != NULL);
	CHECK(this_cpu_slab(s)->slab != NULL);
	CHECK(slab_frozen(owned[FEW]));
	CHECK(ptr_to_slab(owned[FEW])->owner == tls_heap);
	shared_threads_over = 0;
	CHECK_EQ(kmalloc_validate_all(), 0);
}

/* blocks[0 .. FEW x 4) came from shared refills, whole shared slabs among
 * them (FULL once taken whole): free 40 of one such slab here. */
static void *free_into_full(void *arg)
{
	struct slab *slab = arg;
	unsigned freed = 0;

	for (int i = 0; i < BLOCKS && freed < 40; i++)
		if (blocks[i] && ptr_to_slab(blocks[i]) == slab) {
			uslab_free(blocks[i]);
			blocks[i] = NULL;
			freed++;
		}
	CHECK_EQ(freed, 40);
	/* past the few frees it keeps, its frees went to the slab */
	dword_t w = dwcas_read_stable(&slab->xword);
	CHECK(!ctr_frozen(w.hi));
	CHECK(slab->on_partial);
	return NULL;
}

static void test_not_frozen(void)
{
	struct slab *full = NULL;

	for (int i = 0; i < FEW * 4 && !full; i++) {
		dword_t w = dwcas_read_stable(&ptr_to_slab(blocks[i])->xword);

		if (!ctr_frozen(w.hi) && !w.lo)
			full = ptr_to_slab(blocks[i]);
	}
	REQUIRE(full != NULL);
	run(free_into_full, full);
	CHECK_EQ(kmalloc_validate_all(), 0);
}

/* Frees 100 blocks of a class it never allocated. */
static void *consume(void *arg)
{
	struct uslab_cache *s = arg;
	unsigned freed = 0;

	for (int i = 0; i < BLOCKS && freed < 100; i++)
		if (blocks[i] && !ptr_to_slab(blocks[i])->owner) {
			uslab_free(blocks[i]);
			blocks[i] = NULL;
			freed++;
		}
	CHECK_EQ(freed, 100);
	unsigned kept = chain_len(s, this_cpu_slab(s)->freelist);

	printf("consumer: keeps %u of 100 blocks it freed\n", kept);
	CHECK(kept >= 1 && kept <= FEW);
	return NULL;
}

static void test_consumer(void)
{
	run(consume, cls);
	CHECK_EQ(kmalloc_validate_all(), 0);
}

static void *alloc_other_class(void *arg)
{
	void *p = uslab_malloc((size_t)(uintptr_t)arg);

	REQUIRE(p != NULL);
	CHECK(slab_frozen(p));
	CHECK(this_cpu_slab(class_of(p))->slab == ptr_to_slab(p));
	uslab_free(p);
	return NULL;
}

static void test_few_threads(void)
{
	shared_threads_over = 1000;
	run(alloc_other_class, (void *)(uintptr_t)(4 * SIZE));
	shared_threads_over = 0;
}

int main(void)
{
	shared_threads_over = 0;   /* any running thread is one too many */
	test_shared();
	test_still_shared();
	test_not_frozen();
	test_consumer();
	test_few_threads();
	for (int i = 0; i < BLOCKS; i++)
		uslab_free(blocks[i]);
	for (int i = 0; i <= FEW; i++)
		uslab_free(owned[i]);
	uslab_thread_flush();
	CHECK_EQ(kmalloc_validate_all(), 0);
	return test_done("shared_refill_unit");
}
