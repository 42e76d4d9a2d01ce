/* SPDX-License-Identifier: MIT */
/*
 * cache_debug.c - the cache API's debug mode (USLAB_DEBUG=1,
 * allocator/cache/debug.c), run with USLAB_DEBUG_QUARANTINE=64k.
 *
 *   works       objects of every size and alignment keep their contents,
 *               are aligned, come new filled with 0xA5; object_size is the
 *               size asked for; info does
 *               not count objects in quarantine as live; a constructor's
 *               cache hands out constructed objects and keeps their state
 *               across free and reuse
 *   detects     each in a forked child, one line naming the call, the
 *               object, its size, its cache and its allocation site (a
 *               function of this program, found with dladdr), then SIGABRT:
 *               an overflow by 1 byte, an underflow, a double free with
 *               other frees between, a write after free found when the
 *               object leaves the quarantine, a red zone overwritten found
 *               by uslab_cache_validate; and a write into a free slot
 *               (an overflow into the free neighbour) found when the slot
 *               is handed out, with no sites to name
 *   quarantine  a freed object is not handed out again before 64 KiB of
 *               later frees of its cache
 *   leaks       uslab_cache_destroy of a cache with live objects, and exit,
 *               report them by allocation site
 */
#define _GNU_SOURCE
#define USLAB_TEST_PRELOAD
#include "test.h"

#include <dlfcn.h>
#include <stdint.h>

struct uslab_cache;
struct cache_info {   /* uslab.h's struct uslab_cache_info */
	size_t object_size, objects_per_slab, slab_bytes, slabs, partial_slabs, live_objects,
		slabs_allocated, slabs_freed;
};
static struct {
	struct uslab_cache *(*create)(const char *, size_t, size_t, unsigned, void (*)(void *));
	void *(*alloc)(struct uslab_cache *);
	void (*free)(struct uslab_cache *, void *);
	int (*destroy)(struct uslab_cache *);
	long (*validate)(struct uslab_cache *);
	size_t (*object_size)(const struct uslab_cache *);
	int (*info)(struct uslab_cache *, struct cache_info *);
} uc;

static void find_api(void)
{
	*(void **)&uc.create = dlsym(RTLD_DEFAULT, "uslab_cache_create");
	*(void **)&uc.alloc = dlsym(RTLD_DEFAULT, "uslab_cache_alloc");
	*(void **)&uc.free = dlsym(RTLD_DEFAULT, "uslab_cache_free");
	*(void **)&uc.destroy = dlsym(RTLD_DEFAULT, "uslab_cache_destroy");
	*(void **)&uc.validate = dlsym(RTLD_DEFAULT, "uslab_cache_validate");
	*(void **)&uc.object_size = dlsym(RTLD_DEFAULT, "uslab_cache_object_size");
	*(void **)&uc.info = dlsym(RTLD_DEFAULT, "uslab_cache_info");
	REQUIRE(uc.create && uc.alloc && uc.free && uc.destroy && uc.validate && uc.object_size &&
		uc.info);
}

/* The allocation site the reports must name: exported (the test is linked
 * with -rdynamic), never inlined. */
__attribute__((noinline)) char *debug_test_cache_alloc(struct uslab_cache *c)
{
	char *p = uc.alloc(c);

	REQUIRE(p != NULL);
	__asm__ volatile("" ::: "memory");
	return p;
}

static struct uslab_cache *new_cache(size_t size, size_t align, void (*ctor)(void *))
{
	struct uslab_cache *c = uc.create("dbg", size, align, 0, ctor);

	REQUIRE(c != NULL);
	return c;
}

/* ---- works ---------------------------------------------------------------------------- */

static void ctor_counter(void *obj)
{
	memset(obj, 0, 40);
	((uint32_t *)obj)[0] = 0xC0FFEE;
}

static void test_works(void)
{
	struct uslab_cache *c = new_cache(40, 64, NULL);
	static char *objs[3000];
	struct cache_info info;

	CHECK(uc.object_size(c) == 40);
	for (int i = 0; i < 3000; i++) {
		objs[i] = debug_test_cache_alloc(c);
		CHECK((uintptr_t)objs[i] % 64 == 0);
		for (int k = 0; k < 40; k++)
			CHECK((uint8_t)objs[i][k] == 0xA5);
		test_fill(objs[i], 40);
	}
	for (int i = 0; i < 3000; i++) {
		CHECK(test_intact(objs[i], 40));
		uc.free(c, objs[i]);
	}
	CHECK(uc.validate(c) == 0);
	CHECK(uc.info(c, &info) == 0 && info.live_objects == 0 && info.object_size == 40);
	CHECK(uc.destroy(c) == 0);

	/* a constructor's object: constructed, and as the program left it */
	c = new_cache(40, 0, ctor_counter);
	uint32_t *o = (uint32_t *)debug_test_cache_alloc(c);
	CHECK(o[0] == 0xC0FFEE && o[1] == 0);
	o[1] = 7;
	uc.free(c, o);
	for (int i = 0; i < 5000; i++) {   /* through the quarantine and out */
		uint32_t *q = (uint32_t *)debug_test_cache_alloc(c);
		CHECK(q[0] == 0xC0FFEE && (q == o ? q[1] == 7 : q[1] == 0));
		uc.free(c, q);
	}
	CHECK(uc.validate(c) == 0);
	CHECK(uc.destroy(c) == 0);

	/* every size and alignment the API takes, to the largest */
	static const size_t sizes[] = { 1, 8, 24, 100, 4096, 100000, 1 << 20 };
	static const size_t aligns[] = { 0, 8, 64, 4096 };
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		for (unsigned a = 0; a < sizeof(aligns) / sizeof(aligns[0]); a++) {
			char *p[3];

			c = new_cache(sizes[i], aligns[a], NULL);
			CHECK(uc.object_size(c) == sizes[i]);
			for (int k = 0; k < 3; k++) {
				p[k] = debug_test_cache_alloc(c);
				CHECK(!aligns[a] || (uintptr_t)p[k] % aligns[a] == 0);
				test_fill(p[k], sizes[i]);
			}
			CHECK(uc.validate(c) == 0);
			for (int k = 0; k < 3; k++) {
				CHECK(test_intact(p[k], sizes[i]));
				uc.free(c, p[k]);
			}
			CHECK(uc.validate(c) == 0);
			CHECK(uc.destroy(c) == 0);
		}
	}
}

/* ---- quarantine ----------------------------------------------------------------------- */

static void test_quarantine(void)
{
	struct uslab_cache *c = new_cache(64, 0, NULL);
	char *p = debug_test_cache_alloc(c);

	uc.free(c, p);
	/* 64 KiB of later frees: 1024 objects of 64 bytes */
	for (int i = 0; i < 1000; i++) {
		char *q = debug_test_cache_alloc(c);
		CHECK(q != p);
		uc.free(c, q);
	}
	CHECK(uc.destroy(c) == 0);
}

/* ---- detects -------------------------------------------------------------------------- */

static void overflow_1(void *arg)
{
	struct uslab_cache *c = new_cache(24, 0, NULL);
	char *p = debug_test_cache_alloc(c);

	(void)arg;
	((volatile char *)p)[24] = 1;
	uc.free(c, p);
}

static void underflow(void *arg)
{
	struct uslab_cache *c = new_cache(24, 0, NULL);
	char *p = debug_test_cache_alloc(c);

	(void)arg;
	((volatile char *)p)[-3] = 1;
	uc.free(c, p);
}

static void double_free_between(void *arg)
{
	struct uslab_cache *c = new_cache(40, 0, NULL);
	char *a = debug_test_cache_alloc(c), *b = debug_test_cache_alloc(c);

	(void)arg;
	uc.free(c, a);
	uc.free(c, b);
	uc.free(c, a);
}

static void write_after_free(void *arg)
{
	struct uslab_cache *c = new_cache(100, 0, NULL);
	char *p = debug_test_cache_alloc(c);

	(void)arg;
	uc.free(c, p);
	((volatile char *)p)[10] = 1;
	for (int i = 0; i < 2000; i++)   /* push it out of the quarantine */
		uc.free(c, debug_test_cache_alloc(c));
}

/* a's slot is a new slab's first, its neighbour free and filled: 24-byte
 * objects have 64-byte slots (16 front, 24, 16 back, the free pointer, 16
 * alignment), so a + 64 is the next object, which the next alloc takes */
static void overflow_into_free(void *arg)
{
	struct uslab_cache *c = new_cache(24, 0, NULL);
	char *a = debug_test_cache_alloc(c);

	(void)arg;
	((volatile char *)a)[64 + 5] = 1;
	debug_test_cache_alloc(c);
}

static void validate_overflow(void *arg)
{
	struct uslab_cache *c = new_cache(24, 0, NULL);
	char *p = debug_test_cache_alloc(c);

	(void)arg;
	((volatile char *)p)[30] = 1;
	uc.validate(c);
}

/* fn in a child must abort with a line that starts with want and names the
 * cache and this program's allocation site (if site) */
static void expect(void (*fn)(void *), const char *want, bool site)
{
	const char *named = site ? "cache dbg, allocated at cache_debug(debug_test_cache_alloc+" :
				   "(24 bytes, cache dbg)";
	struct test_child c;

	test_run_child(fn, NULL, &c);
	if (!test_aborted_with(&c, want)) {
		test_child_failed(&c, want);
		return;
	}
	if (!strstr(c.err, named)) {
		fprintf(stderr, "the report does not say \"%s\": %s", named, c.err);
		test_failures++;
		return;
	}
	printf("  ok: %.*s\n", (int)strcspn(c.err, "\n"), c.err);
}

static void test_detects(void)
{
	expect(overflow_1, "uslab: uslab_cache_free(): red zone of object 0x", true);
	expect(underflow, "uslab: uslab_cache_free(): red zone of object 0x", true);
	expect(double_free_between, "uslab: uslab_cache_free(): double free of object 0x", true);
	expect(write_after_free, "uslab: uslab_cache_free(): write after free to object 0x", true);
	expect(validate_overflow, "uslab: uslab_cache_validate(): red zone of object 0x", true);
	expect(overflow_into_free, "uslab: uslab_cache_alloc(): write after free to object 0x",
	       false);
}

/* ---- leaks ---------------------------------------------------------------------------- */

static void leaks(void *arg)
{
	struct uslab_cache *c = new_cache(100, 0, NULL);

	(void)arg;
	for (int i = 0; i < 3; i++)
		debug_test_cache_alloc(c);
	if (uc.destroy(c) != -EBUSY)
		_exit(3);
	exit(0);   /* and again at exit */
}

static void test_leaks(void)
{
	struct test_child c;
	const char *site = "300 bytes in 3 objects of cache dbg allocated at "
			   "cache_debug(debug_test_cache_alloc+";

	test_run_child(leaks, NULL, &c);
	CHECK(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0);
	const char *destroy = strstr(c.err, "cache dbg: 3 objects (300 bytes) live at "
					    "uslab_cache_destroy");
	const char *at_exit = strstr(c.err, "3 cache objects (300 bytes) live at exit");
	if (!destroy || !at_exit || !strstr(destroy, site) || !strstr(at_exit, site)) {
		fprintf(stderr, "no leak report at destroy and at exit naming %s...: %s\n", site,
			c.err);
		test_failures++;
	}
}

int main(void)
{
	test_require_uslab();
	find_api();
	test_works();
	test_quarantine();
	test_detects();
	test_leaks();
	return test_done("cache_debug");
}
