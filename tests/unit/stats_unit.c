/* SPDX-License-Identifier: MIT */
/*
 * stats_unit - the statistics count exactly what a single thread did.
 *
 * A cache of 64-byte objects (256 per slab) goes through a known sequence:
 * more than a slab's worth allocated, frees in LIFO order (fast frees into
 * the active slab, then a remote free that freezes a full slab for us and
 * owner-local frees into it), more allocations, frees in FIFO order
 * (unfrozen slabs: remote frees), alloc/free pairs (fast path), bulk alloc
 * and free. After each phase the JSON (uslab_stats_json) must say:
 *   alloc_fast + alloc_slow                == allocations performed
 *   free_fast + free_local + free_remote   == frees performed
 *   live_objects                           == allocations - frees
 *   new_slab, slab_freed, slabs            == uslab_cache_info's
 *                                             slabs_allocated, slabs_freed,
 *                                             slabs (new - freed)
 * both before uslab_thread_flush() (the calling thread's unfolded counts
 * are added by the report) and after it. The same for malloc's
 * kmalloc-3072 cache through uslab_malloc/uslab_free, and the table
 * (uslab_stats_print) must agree with the JSON. docs/stats.md must list
 * every counter of the X-macro in allocator/slab/slab.h, with its text, and no
 * other (test_open_doc finds it, as it finds docs/options.md for options_unit).
 */
#define _GNU_SOURCE
#include "test.h"
#include "stats_json.h"
#include "slab.h"
#include "kmalloc.h"   /* kmalloc_startup_end */
#include "uslab.h"

#include <limits.h>
#include <stdint.h>

struct tally {
	const char *name;          /* as it appears in the JSON */
	struct uslab_cache *cache; /* NULL: a kmalloc cache (no uslab_cache_info) */
	long allocs, frees;
};

static void check_counts(const struct tally *t, const char *when)
{
	char *json = stats_json_dump();
	struct stats_obj o;
	int before = test_failures;

	REQUIRE(json);
	if (!stats_json_cache(json, t->name, &o)) {
		fprintf(stderr, "%s: cache %s is not in the JSON\n", when, t->name);
		test_failures++;
		free(json);
		return;
	}
	long allocs = stats_obj_allocs(&o), frees = stats_obj_frees(&o);
	long live = stats_obj_get(&o, "live_objects");
	long new_slab = stats_obj_get(&o, "new_slab"), freed = stats_obj_get(&o, "slab_freed");
	long slabs = stats_obj_get(&o, "slabs");

	CHECK_EQ(allocs, t->allocs);
	CHECK_EQ(frees, t->frees);
	CHECK_EQ(live, t->allocs - t->frees);
	CHECK_EQ(slabs, new_slab - freed);
	CHECK(stats_obj_get(&o, "alloc_slow") >= new_slab);
	CHECK(stats_obj_get(&o, "memory_bytes") == slabs * stats_obj_get(&o, "slab_bytes"));
	CHECK(stats_obj_get(&o, "used_bytes") == live * stats_obj_get(&o, "object_size"));
	if (t->cache) {
		struct uslab_cache_info info;

		CHECK_EQ(uslab_cache_info(t->cache, &info), 0);
		CHECK_EQ(new_slab, info.slabs_allocated);
		CHECK_EQ(freed, info.slabs_freed);
		CHECK_EQ(slabs, info.slabs);
		CHECK_EQ(live, info.live_objects);
		CHECK_EQ(stats_obj_get(&o, "objects_per_slab"), info.objects_per_slab);
		CHECK_EQ(stats_obj_get(&o, "object_size"), info.object_size);
		CHECK_EQ(stats_obj_get(&o, "partial_slabs"), info.partial_slabs);
	}
	if (test_failures != before) {
		const char *nl = o.end;
		fprintf(stderr, "  ^ %s, %s: performed %ld allocs, %ld frees; the JSON says:\n  %.*s\n",
			when, t->name, t->allocs, t->frees, (int)(nl - o.begin + 1), o.begin);
	}
	free(json);
}

/* Check before and after the calling thread folds its counts in. */
static void check_both(const struct tally *t, const char *when)
{
	char what[128];

	snprintf(what, sizeof(what), "%s (unflushed)", when);
	check_counts(t, what);
	uslab_thread_flush();
	snprintf(what, sizeof(what), "%s (flushed)", when);
	check_counts(t, what);
}

static void *t_alloc(struct tally *t)
{
	void *p = t->cache ? uslab_cache_alloc(t->cache) : uslab_malloc(3000);

	REQUIRE(p);
	*(uintptr_t *)p = (uintptr_t)p ^ 0x5a5a;
	t->allocs++;
	return p;
}

static void t_free(struct tally *t, void *p)
{
	REQUIRE(*(uintptr_t *)p == ((uintptr_t)p ^ 0x5a5a));
	if (t->cache)
		uslab_cache_free(t->cache, p);
	else
		uslab_free(p);
	t->frees++;
}

#define N 1000

static void run_sequence(struct tally *t)
{
	static void *a[N], *b[N];

	/* 1: four slabs' worth, nothing freed */
	for (int i = 0; i < N; i++)
		a[i] = t_alloc(t);
	check_both(t, "after 1000 allocations");

	/* 2: LIFO frees of the newest half */
	for (int i = N - 1; i >= N / 2; i--)
		t_free(t, a[i]);
	check_both(t, "after LIFO frees");

	/* 3: more allocations (reuse what was freed) */
	for (int i = 0; i < 300; i++)
		b[i] = t_alloc(t);
	check_counts(t, "after reallocation");

	/* 4: FIFO frees of the oldest half */
	for (int i = 0; i < N / 2; i++)
		t_free(t, a[i]);
	check_both(t, "after FIFO frees");

	/* 5: alloc/free pairs: the fast path */
	for (int i = 0; i < 10000; i++)
		t_free(t, t_alloc(t));
	check_counts(t, "after alloc/free pairs");

	/* 6: interleaved: two allocations, one free, across slabs */
	for (int i = 0; i < N / 2; i++) {
		a[2 * i] = t_alloc(t);
		a[2 * i + 1] = t_alloc(t);
		t_free(t, a[i]);
	}
	for (int i = N / 2; i < N; i++)
		t_free(t, a[i]);
	check_both(t, "after interleaving");

	/* 7: the rest */
	for (int i = 299; i >= 0; i--)
		t_free(t, b[i]);
	check_both(t, "all freed");
}

static void test_bulk(struct tally *t)
{
	static void *objs[600];

	CHECK_EQ(uslab_cache_alloc_bulk(t->cache, 600, objs), 600);
	t->allocs += 600;
	check_counts(t, "after bulk alloc");
	/* free every other one first, then the rest: runs of one and of many */
	void *odd[300], *even[300];
	for (int i = 0; i < 300; i++) {
		even[i] = objs[2 * i];
		odd[i] = objs[2 * i + 1];
	}
	uslab_cache_free_bulk(t->cache, 300, odd);
	uslab_cache_free_bulk(t->cache, 300, even);
	t->frees += 600;
	check_both(t, "after bulk free");
}

static void test_cache(void)
{
	struct uslab_cache *c = uslab_cache_create("stats-64", 64, 0, 0, NULL);
	struct tally t = { "stats-64", c, 0, 0 };

	REQUIRE(c);
	CHECK_EQ(uslab_cache_object_size(c), 64);
	run_sequence(&t);
	test_bulk(&t);

	/* every free path was taken, so the sums above covered all three */
	char *json = stats_json_dump();
	struct stats_obj o;
	REQUIRE(json && stats_json_cache(json, "stats-64", &o));
	CHECK(stats_obj_get(&o, "alloc_fast") > 0);
	CHECK(stats_obj_get(&o, "alloc_slow") > 0);
	CHECK(stats_obj_get(&o, "free_fast") > 0);
	CHECK(stats_obj_get(&o, "free_local") > 0);
	CHECK(stats_obj_get(&o, "free_remote") > 0);
	CHECK(stats_obj_get(&o, "new_slab") >= 4);
	CHECK(stats_obj_get(&o, "cpu_partial_put") > 0);
	free(json);

	/* shrink gives every empty slab back: slabs reach 0, freed == new */
	uslab_cache_shrink(c);
	check_counts(&t, "after shrink");
	struct uslab_cache_info info;
	CHECK_EQ(uslab_cache_info(c, &info), 0);
	CHECK_EQ(info.slabs, 0);
	CHECK_EQ(info.slabs_allocated, info.slabs_freed);
	CHECK(uslab_cache_validate(c) == 0);
	CHECK_EQ(uslab_cache_destroy(c), 0);

	/* The next cache takes the freed id; the counters are kept per thread
	 * by id, and it must start from zero all the same. */
	c = uslab_cache_create("stats-64-again", 64, 0, 0, NULL);
	REQUIRE(c);
	void *p = uslab_cache_alloc(c);
	REQUIRE(p);
	uslab_cache_free(c, p);
	json = stats_json_dump();
	REQUIRE(json && stats_json_cache(json, "stats-64-again", &o));
	CHECK_EQ(stats_obj_get(&o, "alloc_slow"), 1);
	CHECK_EQ(stats_obj_get(&o, "alloc_fast"), 0);
	CHECK_EQ(stats_obj_frees(&o), 1);
	CHECK_EQ(stats_obj_get(&o, "new_slab"), 1);
	CHECK_EQ(stats_obj_get(&o, "cpu_partial_put"), 0);
	free(json);
	CHECK_EQ(uslab_cache_destroy(c), 0);
}

static void test_kmalloc(void)
{
	struct tally t = { "kmalloc-3072", NULL, 0, 0 };

	run_sequence(&t);
	/* every block is freed; the cache keeps a few empty slabs, which trim
	 * must give back, and with them memory to the OS */
	long kept = stats_cache_get(t.name, "slabs");
	long freed = stats_cache_get(t.name, "slab_freed");
	CHECK(kept > 0);   /* else trim has nothing to do here */
	CHECK_EQ(uslab_trim(), 1);
	CHECK_EQ(stats_cache_get(t.name, "slabs"), 0);
	CHECK_EQ(stats_cache_get(t.name, "memory_bytes"), 0);
	CHECK_EQ(stats_cache_get(t.name, "slab_freed"), freed + kept);
	CHECK_EQ(uslab_trim(), 0);   /* nothing left to give back */
	check_counts(&t, "kmalloc after trim");
}

/* The table agrees with the JSON for a cache with live objects. */
static void test_table(void)
{
	struct uslab_cache *c = uslab_cache_create("stats-table", 200, 0, 0, NULL);
	void *p[150];
	char *table, *row;

	REQUIRE(c);
	for (int i = 0; i < 150; i++)
		REQUIRE((p[i] = uslab_cache_alloc(c)) != NULL);
	for (int i = 0; i < 50; i++)
		uslab_cache_free(c, p[i]);
	table = stats_table_dump();
	REQUIRE(table);
	CHECK(strncmp(table, "uslab statistics (dwcas: ", 25) == 0);
	CHECK(strstr(table, "\ncache ") != NULL);
	row = strstr(table, "\nstats-table ");
	CHECK(row != NULL);
	if (row) {
		char name[32];
		long objsize, per_slab, slabs, part, live, af, as, fo, fr;
		int n = sscanf(row + 1, "%31s %ld %ld %ld %ld %ld %ld %ld %ld %ld", name, &objsize,
			       &per_slab, &slabs, &part, &live, &af, &as, &fo, &fr);
		CHECK_EQ(n, 10);
		CHECK_EQ(objsize, uslab_cache_object_size(c));
		CHECK_EQ(live, 100);
		CHECK_EQ(af + as, 150);
		CHECK_EQ(fo + fr, 50);
	}
	free(table);
	for (int i = 50; i < 150; i++)
		uslab_cache_free(c, p[i]);
	CHECK_EQ(uslab_cache_destroy(c), 0);
}

/* The top-level numbers exist and are ordered sensibly. */
static void test_top_level(void)
{
	char *json = stats_json_dump();

	REQUIRE(json);
	CHECK(strstr(json, "\"uslab_version\": \"") != NULL);
	CHECK(strstr(json, "\"dwcas\": \"") != NULL);
	CHECK(strstr(json, "\"caches\": [") != NULL);
	long mapped = stats_json_top(json, "mapped_bytes");
	long committed = stats_json_top(json, "committed_bytes");
	long in_use = stats_json_top(json, "in_use_bytes");
	CHECK(mapped != STATS_MISSING && committed != STATS_MISSING && in_use != STATS_MISSING);
	CHECK(stats_json_top(json, "huge_blocks") != STATS_MISSING);
	CHECK(stats_json_top(json, "huge_bytes") != STATS_MISSING);
	CHECK(committed <= mapped);
	CHECK(in_use <= committed);
	CHECK_EQ(mapped, uslab_mapped_bytes());
	free(json);
}

/* A cache name is free text: the JSON must escape it to stay valid. */
static void test_name_escaping(void)
{
	struct uslab_cache *c = uslab_cache_create("we\"ird\\name", 32, 0, 0, NULL);
	char *json;
	struct stats_obj o;

	REQUIRE(c);
	void *p = uslab_cache_alloc(c);
	json = stats_json_dump();
	REQUIRE(json);
	if (!stats_json_cache(json, "we\\\"ird\\\\name", &o)) {
		const char *raw = strstr(json, "ird");
		fprintf(stderr, "cache name with '\"' and '\\' is not escaped in the JSON: %.40s\n",
			raw ? raw - 12 : "(not found)");
		test_failures++;
	}
	free(json);
	uslab_cache_free(c, p);
	CHECK_EQ(uslab_cache_destroy(c), 0);
}

/* ---- docs/stats.md against the X-macro ------------------------------------------ */

static const struct {
	const char *name, *doc;
} counters[NR_CACHE_STATS] = {
#define X(id, name, doc) [STAT_##id] = { name, doc },
	USLAB_CACHE_STATS(X)
#undef X
};

static void test_docs(void)
{
	char line[1024];
	int seen[NR_CACHE_STATS] = { 0 };
	bool in_table = false;
	FILE *f = test_open_doc("stats.md", "it must describe every counter");

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (line[0] == '#') {
			in_table = strncmp(line, "### Per cache: the counters", 27) == 0;
			continue;
		}
		if (!in_table || strncmp(line, "| `", 3) != 0)
			continue;
		/* | `name` | meaning | */
		char *name = line + 3, *end = strchr(name, '`');
		if (!end) {
			fprintf(stderr, "docs/stats.md: malformed counter row: %s", line);
			test_failures++;
			continue;
		}
		*end = 0;
		int id = -1;
		for (int i = 0; i < NR_CACHE_STATS; i++)
			if (strcmp(counters[i].name, name) == 0)
				id = i;
		if (id < 0) {
			fprintf(stderr, "docs/stats.md lists counter %s, which stats.h does not have\n",
				name);
			test_failures++;
			continue;
		}
		if (seen[id]++) {
			fprintf(stderr, "docs/stats.md lists counter %s twice\n", name);
			test_failures++;
		}
		if (!strstr(end + 1, counters[id].doc)) {
			fprintf(stderr, "docs/stats.md: counter %s: the meaning must contain stats.h's "
					"text \"%s\"\n", name, counters[id].doc);
			test_failures++;
		}
	}
	fclose(f);
	for (int i = 0; i < NR_CACHE_STATS; i++) {
		if (!seen[i]) {
			fprintf(stderr, "docs/stats.md does not describe counter %s: add a row "
					"\"| `%s` | %s |\" under \"### Per cache: the counters\"\n",
				counters[i].name, counters[i].name, counters[i].doc);
			test_failures++;
		}
	}
}

int main(void)
{
	/* exact classes: the counts below assume each size has its own */
	kmalloc_startup_end();
	test_cache();
	test_kmalloc();
	test_table();
	test_top_level();
	test_name_escaping();
	test_docs();
	return test_done("stats_unit");
}
