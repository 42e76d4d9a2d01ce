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
 * (uslab_stats_print) must agree with the JSON: its rows sorted by memory,
 * a total that adds them up, a legend and no internal counter names; 100
 * live malloc(100000) make a "large blocks" row, and the account of the
 * committed memory adds up (JSON and table); USLAB_STATS_VERBOSE adds every
 * counter. docs/stats.md must list
 * every counter of the X-macro in allocator/slab/slab.h, with its text, and no
 * other (test_open_doc finds it, as it finds docs/options.md for options_unit).
 */
#define _GNU_SOURCE
#include "test.h"
#include "stats_json.h"
#include "slab.h"
#include "kmalloc.h"   /* kmalloc_startup_end */
#include "options.h"   /* options_parse_entry */
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

/* "352.0 KiB" (two tokens at p) as bytes; -1 if it is not a size. */
static double table_bytes(double v, const char *unit)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double scale = 1;

	for (int i = 0; i < 5; i++, scale *= 1024)
		if (strcmp(unit, units[i]) == 0)
			return v * scale;
	return -1;
}

/* One row of the table: name, then the columns as the header names them. */
struct table_row {
	char name[32];
	long objsize, live, slots, slabs, allocs, frees;   /* -1 for "-" */
	double memory, in_use;                             /* bytes */
};

static long table_count(const char *tok)
{
	return strcmp(tok, "-") == 0 ? -1 : strtol(tok, NULL, 10);
}

/* Parse a row line (a name may hold one space: "large blocks"). */
static bool table_parse_row(const char *line, struct table_row *r)
{
	char name2[32] = "", osz[24], live[24], slots[24], slabs[24], mu[8], uu[8], fr[16];
	char al[24], fe[24], rem[16];
	double mem, used;
	const char *p = line;
	int n;

	memset(r, 0, sizeof(*r));
	/* the names with a space are the block rows' */
	if (strncmp(line, "large blocks ", 13) == 0 || strncmp(line, "huge blocks ", 12) == 0 ||
	    strncmp(line, "start-up arena ", 15) == 0) {
		n = sscanf(line, "%31s %31s", r->name, name2);
		size_t len = strlen(r->name), room = sizeof(r->name) - len - 2;
		size_t n2 = strnlen(name2, room);

		r->name[len] = ' ';
		memcpy(r->name + len + 1, name2, n2);
		r->name[len + 1 + n2] = 0;
		p = strstr(line, name2) + strlen(name2);
	} else {
		n = sscanf(line, "%31s", r->name);
		p = line + strlen(r->name);
	}
	if (n < 1)
		return false;
	if (strcmp(r->name, "total") == 0) {   /* no objsize column */
		n = sscanf(p, "%23s %23s %23s %lf %7s %lf %7s %15s %23s %23s %15s", live, slots,
			   slabs, &mem, mu, &used, uu, fr, al, fe, rem);
		snprintf(osz, sizeof(osz), "-");
		n = n == 11 ? 12 : 0;
	} else {
		n = sscanf(p, "%23s %23s %23s %23s %lf %7s %lf %7s %15s %23s %23s %15s", osz, live,
			   slots, slabs, &mem, mu, &used, uu, fr, al, fe, rem);
	}
	if (n != 12)
		return false;
	r->objsize = table_count(osz);
	r->live = table_count(live);
	r->slots = table_count(slots);
	r->slabs = table_count(slabs);
	r->allocs = table_count(al);
	r->frees = table_count(fe);
	r->memory = table_bytes(mem, mu);
	r->in_use = table_bytes(used, uu);
	return r->memory >= 0 && r->in_use >= 0;
}

/* Every row of the table between the header and the total; the total in *t. */
static int table_rows(const char *table, struct table_row *rows, int max, struct table_row *t)
{
	const char *line = strstr(table, "\nname ");
	int n = 0;

	memset(t, 0, sizeof(*t));
	if (!line)
		return -1;
	for (line = strchr(line + 1, '\n'); line && line[1]; line = strchr(line + 1, '\n')) {
		struct table_row r;

		if (!table_parse_row(line + 1, &r)) {
			char bad[120];
			snprintf(bad, sizeof(bad), "%s", line + 1);
			*strchrnul(bad, '\n') = 0;
			fprintf(stderr, "table: a row that does not parse: %s\n", bad);
			test_failures++;
			return -1;
		}
		if (strcmp(r.name, "total") == 0) {
			*t = r;
			return n;
		}
		if (n < max)
			rows[n++] = r;
	}
	fprintf(stderr, "table: no total row\n");
	test_failures++;
	return -1;
}

static const struct table_row *table_find(const struct table_row *rows, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (strcmp(rows[i].name, name) == 0)
			return &rows[i];
	return NULL;
}

/*
 * The table agrees with the JSON for a cache with live objects; its rows are
 * sorted by memory, the total adds them up, and a legend explains the
 * columns, which use no internal counter names.
 */
static void test_table(void)
{
	struct uslab_cache *c = uslab_cache_create("stats-table", 200, 0, 0, NULL);
	struct table_row rows[128], total;
	void *p[150];
	char *table;

	REQUIRE(c);
	for (int i = 0; i < 150; i++)
		REQUIRE((p[i] = uslab_cache_alloc(c)) != NULL);
	for (int i = 0; i < 50; i++)
		uslab_cache_free(c, p[i]);
	table = stats_table_dump();
	REQUIRE(table);
	CHECK(strncmp(table, "uslab statistics (dwcas: ", 25) == 0);
	CHECK(strstr(table, "\nname ") != NULL);
	CHECK(strstr(table, "\ncolumns: objsize bytes per object slot;") != NULL);
	for (const char *internal = "cpu_part\0free_own\0retry\0alloc_fast\0"; *internal;
	     internal += strlen(internal) + 1) {
		if (strstr(table, internal)) {
			fprintf(stderr, "the default table names the internal counter %s\n", internal);
			test_failures++;
		}
	}
	int n = table_rows(table, rows, 128, &total);
	const struct table_row *r = n > 0 ? table_find(rows, n, "stats-table") : NULL;
	CHECK(r != NULL);
	if (r) {
		long slabs = stats_cache_get("stats-table", "slabs");
		CHECK_EQ(r->objsize, uslab_cache_object_size(c));
		CHECK_EQ(r->live, 100);
		CHECK_EQ(r->allocs, 150);
		CHECK_EQ(r->frees, 50);
		CHECK_EQ(r->slabs, slabs);
		CHECK_EQ(r->slots, slabs * stats_cache_get("stats-table", "objects_per_slab"));
		/* one decimal of the unit: within 5 % (and 0.05 of the unit) */
		double mem = (double)stats_cache_get("stats-table", "memory_bytes");
		CHECK(r->memory > mem * 0.95 && r->memory < mem * 1.05);
		CHECK(r->in_use > 100.0 * uslab_cache_object_size(c) * 0.95 &&
		      r->in_use < 100.0 * uslab_cache_object_size(c) * 1.05);
	}
	long live = 0, slabs = 0;
	for (int i = 0; i < n; i++) {
		if (i && rows[i].memory > rows[i - 1].memory * 1.0001) {
			fprintf(stderr, "table: %s (%.0f bytes) after %s (%.0f): not sorted by memory\n",
				rows[i].name, rows[i].memory, rows[i - 1].name, rows[i - 1].memory);
			test_failures++;
		}
		live += rows[i].live > 0 ? rows[i].live : 0;
		slabs += rows[i].slabs > 0 ? rows[i].slabs : 0;
	}
	if (n > 0) {
		CHECK_EQ(total.live, live);
		CHECK_EQ(total.slabs, slabs);
	}
	free(table);
	for (int i = 50; i < 150; i++)
		uslab_cache_free(c, p[i]);
	CHECK_EQ(uslab_cache_destroy(c), 0);
}

/*
 * Large blocks have a row of their own (100 live malloc(100000) show up),
 * and the account of committed memory adds up, in the JSON and the table.
 */
/* Objects this thread freed and keeps for its next allocations are "cached
 * by threads", neither in use nor free in slabs; flushing gives them back. */
static void test_cached(void)
{
	struct uslab_cache *c = uslab_cache_create("stats-cached", 256, 0, 0, NULL);
	void *p[200];

	REQUIRE(c);
	for (int i = 0; i < 200; i++)
		REQUIRE((p[i] = uslab_cache_alloc(c)) != NULL);
	for (int i = 0; i < 200; i++)
		uslab_cache_free(c, p[i]);
	char *json = stats_json_dump();
	REQUIRE(json);
	long cached = stats_json_top(json, "cached_bytes");
	CHECK(cached >= 200 * 256L);
	CHECK_EQ(stats_account_sum(json), stats_json_top(json, "total_committed_bytes"));
	free(json);
	uslab_thread_flush();
	json = stats_json_dump();
	REQUIRE(json);
	CHECK(stats_json_top(json, "cached_bytes") < cached);
	CHECK_EQ(stats_account_sum(json), stats_json_top(json, "total_committed_bytes"));
	free(json);
	CHECK_EQ(uslab_cache_destroy(c), 0);
}

static void test_blocks_and_account(void)
{
	struct table_row rows[128], total;
	void *p[100];

	for (int i = 0; i < 100; i++)
		REQUIRE((p[i] = uslab_malloc(200000)) != NULL);
	char *json = stats_json_dump(), *table = stats_table_dump();
	REQUIRE(json && table);

	CHECK_EQ(stats_json_top(json, "large_blocks"), 100);
	long large = stats_json_top(json, "large_bytes");
	CHECK(large >= 100 * 200000L && large <= 100 * 212992L);   /* 13 units each */
	long sum = stats_account_sum(json);
	long committed = stats_json_top(json, "committed_bytes");
	CHECK_EQ(sum, stats_json_top(json, "total_committed_bytes"));
	/* the segments' share: everything but huge blocks, kept huge ranges, the
	 * arena and the metadata outside segments */
	CHECK_EQ(committed, sum - stats_json_top(json, "huge_bytes") -
				    stats_json_top(json, "huge_cached_bytes") -
				    stats_json_top(json, "startup_arena_cut_bytes") -
				    stats_json_top(json, "metadata_bytes"));
	/* this thread's heap, at least, and never more than is mapped */
	CHECK(stats_json_top(json, "metadata_bytes") > 0);
	CHECK(stats_json_top(json, "metadata_bytes") <= stats_json_top(json, "metadata_mapped_bytes"));
	CHECK_EQ(stats_json_top(json, "committed_bytes") + stats_json_top(json, "unused_mapped_bytes"),
		 stats_json_top(json, "segments") * (4L << 20));

	int n = table_rows(table, rows, 128, &total);
	const struct table_row *r = n > 0 ? table_find(rows, n, "large blocks") : NULL;
	CHECK(r != NULL);
	if (r) {
		CHECK_EQ(r->live, 100);
		CHECK(r->memory > large * 0.95 && r->memory < large * 1.05);
		CHECK(r == &rows[0]);   /* the most memory here */
	}
	/* the account's lines, each with its size and share */
	static const char *const lines[] = { "memory committed", "objects in use", "free in slabs",
		"large blocks", "large, kept", "huge blocks", "huge, kept", "start-up arena",
		"free, not returned", "segment headers", "metadata" };
	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
		char pat[64];
		snprintf(pat, sizeof(pat), "\n  %s ", lines[i]);
		if (!strstr(table, pat)) {
			fprintf(stderr, "table: no account line '%s'\n", lines[i]);
			test_failures++;
		}
	}
	free(json);
	free(table);
	for (int i = 0; i < 100; i++)
		uslab_free(p[i]);
	CHECK_EQ(stats_cache_get("large blocks", "slabs"), STATS_MISSING);   /* not a cache */
	json = stats_json_dump();
	REQUIRE(json);
	CHECK_EQ(stats_json_top(json, "large_blocks"), 0);
	free(json);
}

/* USLAB_STATS_VERBOSE=1: every counter of every cache, by its JSON name. */
static void test_verbose(void)
{
	void *p = uslab_malloc(40);
	char *table;

	options_parse_entry("USLAB_STATS_VERBOSE=1");
	table = stats_table_dump();
	options_parse_entry("USLAB_STATS_VERBOSE=0");
	REQUIRE(table);
	const char *v = strstr(table, "\ncounters (docs/stats.md):\n");
	CHECK(v != NULL);
	if (v) {
		const char *row = strstr(v, "\nkmalloc-48: ");
		CHECK(row != NULL);
#define X(id, name, doc) \
		if (row && !strstr(row, " " name " ")) { \
			fprintf(stderr, "verbose table: no counter %s\n", name); \
			test_failures++; \
		}
		USLAB_CACHE_STATS(X)
#undef X
	}
	free(table);
	table = stats_table_dump();
	REQUIRE(table);
	CHECK(strstr(table, "counters (docs/stats.md)") == NULL);
	free(table);
	uslab_free(p);
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
	/* when it was written, in ms since the epoch: now, give or take */
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	long t = stats_json_top(json, "time_ms"), ms = now.tv_sec * 1000L + now.tv_nsec / 1000000;
	CHECK(t != STATS_MISSING && t <= ms && t > ms - 60000);
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
	test_blocks_and_account();
	test_cached();
	test_verbose();
	test_top_level();
	test_name_escaping();
	test_docs();
	return test_done("stats_unit");
}
