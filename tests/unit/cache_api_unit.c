/* cache_api_unit - single-threaded semantics of the uslab_cache_* API. */
#include "test.h"
#include "uslab.h"

#include <errno.h>
#include <stdint.h>

static void test_sizes_and_alignments(void)
{
	static const size_t sizes[] = { 1, 7, 8, 9, 16, 24, 33, 64, 100, 128, 255, 512, 1000,
					4096, 5000, 16384, 32768, 40000, 65536, 1 << 20 };
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		for (size_t align = 0; align <= 4096; align = align ? align * 2 : 8) {
			struct uslab_cache *c = uslab_cache_create("sz", sizes[i], align, 0, NULL);
			void *objs[40];
			size_t n = sizes[i] > 100000 ? 5 : 40;

			CHECK(c != NULL);
			if (!c)
				continue;
			size_t want = align ? align : (sizes[i] >= 16 ? 16 : 8);
			for (size_t k = 0; k < n; k++) {
				objs[k] = uslab_cache_alloc(c);
				CHECK(objs[k] != NULL);
				CHECK(((uintptr_t)objs[k] & (want - 1)) == 0);
				test_fill(objs[k], sizes[i]);
			}
			for (size_t k = 0; k < n; k++)
				for (size_t j = k + 1; j < n; j++)
					CHECK(objs[k] != objs[j]);
			for (size_t k = 0; k < n; k++) {
				CHECK(test_intact(objs[k], sizes[i]));
				uslab_cache_free(c, objs[k]);
			}
			CHECK_EQ(uslab_cache_validate(c), 0);
			CHECK_EQ(uslab_cache_destroy(c), 0);
		}
	}
}

static void test_bad_args(void)
{
	errno = 0;
	CHECK(uslab_cache_create("x", 0, 0, 0, NULL) == NULL && errno == EINVAL);
	errno = 0;
	CHECK(uslab_cache_create("x", 16, 3, 0, NULL) == NULL && errno == EINVAL);
	errno = 0;
	CHECK(uslab_cache_create("x", 16, 8192 * 4, 0, NULL) == NULL && errno == EINVAL);
	errno = 0;
	CHECK(uslab_cache_create("x", (1 << 20) + 1, 0, 0, NULL) == NULL && errno == EINVAL);
	errno = 0;
	CHECK(uslab_cache_create("x", 16, 0, 0x100, NULL) == NULL && errno == EINVAL);
	struct uslab_cache *c = uslab_cache_create(NULL, 16, 0, USLAB_HWCACHE_ALIGN, NULL);
	CHECK(c != NULL);
	void *p = uslab_cache_alloc(c);
	CHECK(((uintptr_t)p & 63) == 0);
	CHECK_EQ(uslab_cache_object_size(c), 64);
	uslab_cache_free(c, p);
	uslab_cache_free(c, NULL);
	CHECK_EQ(uslab_cache_destroy(c), 0);
}

struct thing {
	uint64_t magic;
	uint64_t generation;
	char payload[48];
};
static long ctor_calls;

static void thing_ctor(void *p)
{
	struct thing *t = p;
	t->magic = 0xC0FFEE;
	t->generation = 0;
	memset(t->payload, 'k', sizeof(t->payload));
	ctor_calls++;
}

static void test_ctor_contract(void)
{
	struct uslab_cache *c = uslab_cache_create("thing", sizeof(struct thing), 0, 0, thing_ctor);
	struct uslab_cache_info info;
	struct thing *t[100];

	CHECK(c != NULL);
	ctor_calls = 0;
	t[0] = uslab_cache_alloc(c);
	CHECK(uslab_cache_info(c, &info) == 0);
	/* objects come into existence a page at a time: the first alloc
	 * constructed those of the slab's first page, not all of them */
	CHECK(ctor_calls >= 1 && ctor_calls < (long)info.objects_per_slab);
	CHECK(t[0]->magic == 0xC0FFEE);
	for (int i = 1; i < 100; i++) {
		t[i] = uslab_cache_alloc(c);
		CHECK(t[i]->magic == 0xC0FFEE && t[i]->payload[47] == 'k');
	}
	long calls = ctor_calls;
	/* objects come back in their constructed state, with the contents kept */
	for (int i = 0; i < 100; i++) {
		t[i]->generation = 7;
		uslab_cache_free(c, t[i]);
	}
	for (int i = 0; i < 100; i++) {
		t[i] = uslab_cache_alloc(c);
		CHECK(t[i]->magic == 0xC0FFEE && t[i]->generation == 7);
		CHECK(t[i]->payload[0] == 'k' && t[i]->payload[47] == 'k');
	}
	CHECK_EQ(ctor_calls, calls);   /* no ctor on reuse */
	/* the rest of the slab, each object once; the next alloc takes a new slab */
	size_t rest = info.objects_per_slab - 100;
	void **more = malloc((rest + 1) * sizeof(*more));
	CHECK(more != NULL);
	for (size_t i = 0; i < rest; i++)
		more[i] = uslab_cache_alloc(c);
	CHECK_EQ(ctor_calls, (long)info.objects_per_slab);
	more[rest] = uslab_cache_alloc(c);
	CHECK(ctor_calls > (long)info.objects_per_slab);
	for (size_t i = 0; i <= rest; i++)
		uslab_cache_free(c, more[i]);
	free(more);
	for (int i = 0; i < 100; i++)
		uslab_cache_free(c, t[i]);
	CHECK_EQ(uslab_cache_validate(c), 0);
	CHECK_EQ(uslab_cache_destroy(c), 0);
}

static void test_bulk(void)
{
	struct uslab_cache *c = uslab_cache_create("bulk", 96, 0, 0, NULL);
	void *objs[5000];

	CHECK_EQ(uslab_cache_alloc_bulk(c, 5000, objs), 5000);
	for (int i = 0; i < 5000; i++)
		test_fill(objs[i], 96);
	for (int i = 0; i < 5000; i++)
		CHECK(test_intact(objs[i], 96));
	struct uslab_cache_info info;
	uslab_cache_info(c, &info);
	CHECK_EQ(info.live_objects, 5000);
	uslab_cache_free_bulk(c, 5000, objs);
	uslab_cache_info(c, &info);
	CHECK_EQ(info.live_objects, 0);
	CHECK_EQ(uslab_cache_validate(c), 0);
	CHECK_EQ(uslab_cache_alloc_bulk(c, 0, objs), 0);
	CHECK_EQ(uslab_cache_destroy(c), 0);
}

static void test_shrink_and_destroy_busy(void)
{
	struct uslab_cache *c = uslab_cache_create("shrink", 256, 0, 0, NULL);
	enum { N = 20000 };
	static void *objs[N];
	struct uslab_cache_info info;

	for (int i = 0; i < N; i++)
		objs[i] = uslab_cache_alloc(c);
	uslab_cache_info(c, &info);
	size_t slabs_full = info.slabs;
	CHECK(slabs_full >= N / info.objects_per_slab);
	size_t mapped_full = uslab_mapped_bytes();

	/* one live object: destroy refuses and leaves the cache usable */
	for (int i = 1; i < N; i++)
		uslab_cache_free(c, objs[i]);
	CHECK_EQ(uslab_cache_destroy(c), -EBUSY);
	void *again = uslab_cache_alloc(c);
	CHECK(again != NULL);
	uslab_cache_free(c, again);
	CHECK_EQ(uslab_cache_validate(c), 0);

	uslab_cache_shrink(c);
	uslab_cache_info(c, &info);
	CHECK(info.slabs <= 1);                  /* only the slab with the live object */
	CHECK(info.slabs_freed >= slabs_full - 1);
	CHECK(uslab_mapped_bytes() < mapped_full);
	CHECK_EQ(uslab_cache_validate(c), 0);
	uslab_cache_free(c, objs[0]);
	CHECK_EQ(uslab_cache_destroy(c), 0);
}

static void test_many_caches(void)
{
	static struct uslab_cache *cs[300];
	for (int i = 0; i < 300; i++) {
		cs[i] = uslab_cache_create("many", 8 + (i % 50) * 8, 0, 0, NULL);
		CHECK(cs[i] != NULL);
		void *p = uslab_cache_alloc(cs[i]);
		CHECK(p != NULL);
		uslab_cache_free(cs[i], p);
	}
	for (int i = 0; i < 300; i++)
		CHECK_EQ(uslab_cache_destroy(cs[i]), 0);
}

int main(void)
{
	printf("dwcas path: %s\n", uslab_dwcas_path());
	test_bad_args();
	test_sizes_and_alignments();
	test_ctor_contract();
	test_bulk();
	test_shrink_and_destroy_busy();
	test_many_caches();
	return test_done("cache_api_unit");
}
