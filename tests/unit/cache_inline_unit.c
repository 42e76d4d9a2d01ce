/*
 * cache_inline_unit - the inline fast paths of uslab.h against the library's
 * out-of-line functions: that the inline ones are in use in an optimised
 * build, that both agree object for object (mixed freely), that a thread's
 * first call (no heap yet) and an exhausted freelist fall through to the
 * library, that objects of ctor caches (free pointer outside the object)
 * keep their constructed state, that the statistics count inline operations,
 * that objects of every size go back by either path (the inline free's
 * object test covers strides up to 32 KiB; bigger ones go to the library),
 * and that misuse the inline free declines - a double free of the head, a
 * foreign or stack pointer, a pointer inside an object of the active slab -
 * is still caught by the library.
 */
#include "test.h"
#include "stats_json.h"
#include "uslab.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#ifndef USLAB_INLINE_FAST_PATHS
#error "an optimised build of this test must get uslab.h's inline fast paths"
#endif

/* The library's own functions, as a program compiled without the inline
 * paths (-O0, USLAB_NO_INLINE) calls them. */
static void *(*volatile lib_alloc)(struct uslab_cache *) = uslab__cache_alloc;
static void (*volatile lib_free)(struct uslab_cache *, void *) = uslab__cache_free;

static void mixed(struct uslab_cache *c, int rounds)
{
	enum { N = 3000 };   /* several slabs of 64-byte objects */
	static void *v[N];

	for (int r = 0; r < rounds; r++) {
		for (int i = 0; i < N; i++) {
			v[i] = (i + r) & 1 ? uslab_cache_alloc(c) : lib_alloc(c);
			REQUIRE(v[i] != NULL);
			memset(v[i], i & 0xff, 64);
		}
		for (int i = 0; i < N; i++)
			for (int k = 0; k < 64; k++)
				if (((unsigned char *)v[i])[k] != (i & 0xff)) {
					CHECK(!"object overwritten while live");
					break;
				}
		for (int i = 0; i < N; i++) {
			/* LIFO half the time: frees into the active slab (inline
			 * path) and into others (library path) */
			int j = r & 1 ? N - 1 - i : i;
			if ((i + r) % 3)
				uslab_cache_free(c, v[j]);
			else
				lib_free(c, v[j]);
		}
	}
}

static void test_mixed_paths(void)
{
	struct uslab_cache *c = uslab_cache_create("inline-64", 64, 0, 0, NULL);
	struct uslab_cache_info info;

	REQUIRE(c != NULL);
	mixed(c, 6);
	CHECK_EQ(uslab_cache_validate(c), 0);
	CHECK_EQ(uslab_cache_info(c, &info), 0);
	CHECK_EQ(info.live_objects, 0);
	CHECK_EQ(uslab_cache_destroy(c), 0);
}

/* Objects of sizes around the inline free's bound, allocated and freed in
 * turns by both paths, LIFO and FIFO, their contents checked. */
static void test_sizes(void)
{
	static const size_t sizes[] = { 8, 24, 100, 1000, 4096, 16000, 32768, 32776, 40000 };
	enum { N = 40 };
	static void *v[N];

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t size = sizes[s];
		struct uslab_cache *c = uslab_cache_create("inline-sizes", size, 0, 0, NULL);

		REQUIRE(c != NULL);
		for (int r = 0; r < 4; r++) {
			for (int i = 0; i < N; i++) {
				v[i] = i & 1 ? uslab_cache_alloc(c) : lib_alloc(c);
				REQUIRE(v[i] != NULL);
				memset(v[i], i + r, size);
			}
			for (int i = 0; i < N; i++) {
				int j = r & 1 ? N - 1 - i : i;
				unsigned char *b = v[j];

				if (b[0] != (unsigned char)(j + r) || b[size - 1] != (unsigned char)(j + r))
					CHECK(!"object overwritten while live");
				if (i % 3)
					uslab_cache_free(c, b);
				else
					lib_free(c, b);
			}
		}
		CHECK_EQ(uslab_cache_validate(c), 0);
		CHECK_EQ(uslab_cache_destroy(c), 0);
	}
}

/* A new thread has no heap: its first alloc and free go through the
 * library (the empty heap's cpu slabs say so), later ones inline. */
static void *fresh_thread(void *arg)
{
	struct uslab_cache *c = arg;
	void *a = uslab_cache_alloc(c);
	void *b = uslab_cache_alloc(c);

	uslab_cache_free(c, a);
	void *again = uslab_cache_alloc(c);   /* the freed one comes back first */
	uslab_cache_free(c, b);
	uslab_cache_free(c, again);
	return (void *)(uintptr_t)(a != NULL && b != NULL && a != b && again == a);
}

static void test_fresh_thread(void)
{
	struct uslab_cache *c = uslab_cache_create("inline-fresh", 32, 0, 0, NULL);
	pthread_t t;
	void *ok = NULL;

	REQUIRE(c != NULL);
	for (int i = 0; i < 4; i++) {
		REQUIRE(pthread_create(&t, NULL, fresh_thread, c) == 0);
		pthread_join(t, &ok);
		CHECK(ok != NULL);
	}
	CHECK_EQ(uslab_cache_validate(c), 0);
	CHECK_EQ(uslab_cache_destroy(c), 0);
}

/* ctor caches keep the free pointer outside the object (fp_offset > 0); the
 * inline paths, which link through the first word, must leave them to the
 * library (their inline_offset names an always-empty cpu slab), or the
 * first word would be clobbered. */
static void ctor(void *p)
{
	memset(p, 0x5a, 40);
}

static void test_ctor_cache(void)
{
	struct uslab_cache *c = uslab_cache_create("inline-ctor", 40, 0, 0, ctor);
	void *v[500];

	REQUIRE(c != NULL);
	for (int r = 0; r < 4; r++) {
		for (int i = 0; i < 500; i++) {
			v[i] = uslab_cache_alloc(c);
			REQUIRE(v[i] != NULL);
			for (int k = 0; k < 40; k++)
				if (((unsigned char *)v[i])[k] != 0x5a) {
					CHECK(!"constructed state lost");
					break;
				}
		}
		for (int i = 0; i < 500; i++)
			uslab_cache_free(c, v[r & 1 ? i : 499 - i]);
	}
	CHECK_EQ(uslab_cache_validate(c), 0);
	CHECK_EQ(uslab_cache_destroy(c), 0);
}

/* The per-cache counters see inline allocations and frees (they are folded
 * in at refills and when statistics are read). */
static void test_statistics(void)
{
	struct uslab_cache *c = uslab_cache_create("inline-stats", 64, 0, 0, NULL);
	struct stats_obj o;
	enum { PAIRS = 100000 };

	REQUIRE(c != NULL);
	uslab_cache_free(c, uslab_cache_alloc(c));   /* the first pair goes slow */
	for (int i = 0; i < PAIRS; i++) {
		void *p = uslab_cache_alloc(c);
		__asm__ __volatile__("" ::"r"(p) : "memory");
		uslab_cache_free(c, p);
	}
	char *json = stats_json_dump();
	REQUIRE(json && stats_json_cache(json, "inline-stats", &o));
	long allocs = stats_obj_allocs(&o), frees = stats_obj_frees(&o);
	CHECK_EQ(allocs, PAIRS + 1);
	CHECK_EQ(frees, PAIRS + 1);
	free(json);
	CHECK_EQ(uslab_cache_destroy(c), 0);
}

static void double_free_head(void *unused)
{
	struct uslab_cache *c = uslab_cache_create("inline-df", 64, 0, 0, NULL);
	void *p = uslab_cache_alloc(c);

	uslab_cache_free(c, p);
	uslab_cache_free(c, p);   /* p heads the cpu freelist: inline path declines */
}

static void foreign_object(void *unused)
{
	struct uslab_cache *a = uslab_cache_create("inline-a", 64, 0, 0, NULL);
	struct uslab_cache *b = uslab_cache_create("inline-b", 64, 0, 0, NULL);
	void *p = uslab_cache_alloc(a);

	uslab_cache_alloc(b);
	uslab_cache_free(b, p);   /* outside b's active slab: the library checks */
}

/* A pointer inside an object of the active slab: the inline free's object
 * test declines it (arg: the object size; the pointer is 8 bytes in, and
 * for 4096 also half-way; above 32 KiB the library takes every free). */
static void interior_pointer(void *arg)
{
	size_t size = (size_t)arg;
	struct uslab_cache *c = uslab_cache_create("inline-interior", size, 0, 0, NULL);
	char *p = uslab_cache_alloc(c), *q = uslab_cache_alloc(c);

	uslab_cache_free(c, q);
	uslab_cache_free(c, p + (size == 4096 ? 2048 : 8));
}

static void stack_pointer(void *unused)
{
	struct uslab_cache *c = uslab_cache_create("inline-stack", 64, 0, 0, NULL);
	long local[8];

	uslab_cache_alloc(c);
	uslab_cache_free(c, local);
}

int main(void)
{
	test_mixed_paths();
	test_fresh_thread();
	test_ctor_cache();
	test_statistics();
	test_sizes();
	/* the objects are made in the child: the lines are matched up to the pointer */
	test_expect_abort(double_free_head, NULL, "uslab: uslab_cache_free(): double free 0x");
	test_expect_abort(foreign_object, NULL,
			  "uslab: uslab_cache_free(): pointer from another cache 0x");
	test_expect_abort(stack_pointer, NULL, "uslab: uslab_cache_free(): invalid pointer 0x");
	static const size_t interior[] = { 24, 64, 4096, 40000 };
	for (size_t i = 0; i < sizeof(interior) / sizeof(interior[0]); i++)
		test_expect_abort(interior_pointer, (void *)interior[i],
				  "uslab: uslab_cache_free(): misaligned pointer 0x");
	return test_done("cache_inline_unit");
}
