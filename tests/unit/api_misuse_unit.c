/*
 * api_misuse_unit - misuse of the API that once went unseen or corrupted the
 * heap, and must now be refused or reported:
 *   - aligned_alloc/memalign/posix_memalign above 16 KiB with size 0: each
 *     result a block of its own (it used to land past its own mapping, on
 *     another live block);
 *   - uslab_cache_free_bulk with one object twice, outside the active slab:
 *     a "double free" abort (it used to count the object twice, wrapping the
 *     slab's in-use counter into its object count and frozen bit);
 *   - uslab_cache_destroy of a cache destroyed already: -EINVAL and a line
 *     on stderr, and a cache created in between is not the stale handle.
 */
#include "test.h"
#include "uslab.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

/* ---- aligned requests of size 0 ---------------------------------------------------- */

static void test_aligned_zero(void)
{
	enum { ROUNDS = 200 };
	static void *keep[ROUNDS], *zero[ROUNDS];

	for (size_t align = 32768; align <= (4u << 20); align *= 2) {
		for (int i = 0; i < ROUNDS; i++) {
			keep[i] = uslab_aligned_alloc(align, 4096);
			REQUIRE(keep[i] != NULL);
			test_fill(keep[i], 4096);
			switch (i % 3) {
			case 0: zero[i] = uslab_aligned_alloc(align, 0); break;
			case 1: zero[i] = uslab_memalign(align, 0); break;
			default: CHECK_EQ(uslab_posix_memalign(&zero[i], align, 0), 0); break;
			}
			REQUIRE(zero[i] != NULL);
			CHECK_EQ((uintptr_t)zero[i] % align, 0);
			CHECK(uslab_malloc_usable_size(zero[i]) >= 1);
			/* a block of its own: no other live block starts there */
			for (int k = 0; k <= i; k++)
				CHECK(zero[i] != keep[k] && (k == i || zero[i] != zero[k]));
			memset(zero[i], 0x5a, 1);
		}
		for (int i = 0; i < ROUNDS; i++) {
			uslab_free(zero[i]);
			/* what the next request of the size gets is not a live block */
			void *c = uslab_aligned_alloc(align, 4096);
			REQUIRE(c != NULL);
			for (int k = i; k < ROUNDS; k++)
				CHECK(c != keep[k]);
			uslab_free(c);
		}
		for (int i = 0; i < ROUNDS; i++) {
			CHECK(test_intact(keep[i], 4096));
			uslab_free(keep[i]);
		}
	}
}

/* ---- free_bulk with one object twice -------------------------------------------------- */

static struct uslab_cache *bulk_cache;

static void free_bulk_twice(void *arg)
{
	void **objs = arg;

	uslab_cache_free_bulk(bulk_cache, 2, objs);
}

static void free_bulk_twice_apart(void *arg)
{
	void **objs = arg;
	void *three[3] = { objs[0], objs[1], objs[0] };

	uslab_cache_free_bulk(bulk_cache, 3, three);
}

static void test_free_bulk_twice(void)
{
	enum { N = 4096 };   /* several slabs: the first ones are not the active one */
	static void *objs[N];

	bulk_cache = uslab_cache_create("bulk-twice", 64, 0, 0, NULL);
	REQUIRE(bulk_cache != NULL);
	REQUIRE(uslab_cache_alloc_bulk(bulk_cache, N, objs) == N);
	void *twice[2] = { objs[0], objs[0] };
	test_expect_abort(free_bulk_twice, twice, "uslab: uslab_cache_free_bulk(): double free");
	void *apart[2] = { objs[1], objs[2] };
	test_expect_abort(free_bulk_twice_apart, apart, "uslab: uslab_cache_free_bulk(): double free");
	/* in this process nothing was freed twice: all of it goes back cleanly */
	uslab_cache_free_bulk(bulk_cache, N, objs);
	CHECK_EQ(uslab_cache_validate(bulk_cache), 0);
	CHECK_EQ(uslab_cache_destroy(bulk_cache), 0);
}

/* ---- a stale cache handle ---------------------------------------------------------------- */

static void test_destroy_twice(void)
{
	struct uslab_cache *a = uslab_cache_create("stale", 96, 0, 0, NULL);

	void *objs[4];

	REQUIRE(a != NULL);
	REQUIRE(uslab_cache_alloc_bulk(a, 4, objs) == 4);
	uslab_cache_free_bulk(a, 4, objs);
	CHECK_EQ(uslab_cache_destroy(a), 0);
	CHECK_EQ(uslab_cache_destroy(a), -EINVAL);   /* and a line on stderr */

	/* caches made now are not at a's address, so a stays stale */
	struct uslab_cache *b[8];
	for (int i = 0; i < 8; i++) {
		b[i] = uslab_cache_create("fresh", 96, 0, 0, NULL);
		REQUIRE(b[i] != NULL);
		CHECK(b[i] != a);
	}
	CHECK_EQ(uslab_cache_destroy(a), -EINVAL);
	for (int i = 0; i < 8; i++) {
		void *p = uslab_cache_alloc(b[i]);
		REQUIRE(p != NULL);
		uslab_cache_free(b[i], p);
		CHECK_EQ(uslab_cache_validate(b[i]), 0);
		CHECK_EQ(uslab_cache_destroy(b[i]), 0);
	}
}

int main(void)
{
	test_aligned_zero();
	test_free_bulk_twice();
	test_destroy_twice();
	return test_done("api_misuse_unit");
}
