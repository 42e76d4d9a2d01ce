/* SPDX-License-Identifier: MIT */
/*
 * stats_json.h - read uslab_stats_json() back, for the statistics tests.
 *
 * Not a JSON parser: it knows the shape stats.c writes (one cache object per
 * line, numbers as plain integers) and looks keys up by text, which is all
 * a test needs and keeps the test independent of the writer's code.
 *
 *   char *j = stats_json_dump();                 the current JSON (free() it)
 *   long v = stats_json_top(j, "mapped_bytes");  a top-level number
 *   struct stats_obj c;
 *   stats_json_cache(j, "kmalloc-64", &c);       one cache's object
 *   long n = stats_obj_get(&c, "alloc_fast");    a number in it
 *   stats_cache_get("kmalloc-64", "slabs")       the same, from a dump made now
 *   stats_account_sum(j)                         the account's parts, added up
 * A missing key reads as STATS_MISSING.
 */
#ifndef USLAB_TEST_STATS_JSON_H
#define USLAB_TEST_STATS_JSON_H

#include "uslab.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STATS_MISSING LONG_MIN

/* What print() writes, in a string to free(). */
static inline char *stats_dump_with(void (*print)(FILE *))
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	print(f);
	fclose(f);
	return buf;
}

static inline char *stats_json_dump(void)
{
	return stats_dump_with(uslab_stats_json);
}

/* The table uslab_stats_print writes. */
static inline char *stats_table_dump(void)
{
	return stats_dump_with(uslab_stats_print);
}

/* The number after "key": in [p, end); STATS_MISSING if absent. */
static inline long stats_find_number(const char *p, const char *end, const char *key)
{
	char pat[96];
	size_t n = (size_t)snprintf(pat, sizeof(pat), "\"%s\": ", key);

	for (const char *q = p; q && q + n <= end; q++) {
		q = strstr(q, pat);
		if (!q || q + n > end)
			break;
		/* a key, not the tail of a longer key or a string value */
		if (q > p && (q[-1] == ' ' || q[-1] == '{' || q[-1] == '\n'))
			return strtol(q + n, NULL, 10);
	}
	return STATS_MISSING;
}

static inline long stats_json_top(const char *json, const char *key)
{
	const char *caches = strstr(json, "\"caches\"");

	return stats_find_number(json, caches ? caches : json + strlen(json), key);
}

struct stats_obj {
	const char *begin, *end;   /* the cache's {...} */
};

/* Find the cache object whose "name" is exactly the JSON string name_json
 * (already escaped as it should appear between the quotes). */
static inline bool stats_json_cache(const char *json, const char *name_json,
				    struct stats_obj *o)
{
	char pat[160];
	const char *p;

	snprintf(pat, sizeof(pat), "{\"name\": \"%s\",", name_json);
	p = strstr(json, pat);
	if (!p)
		return false;
	o->begin = p;
	o->end = strchr(p, '}');
	return o->end != NULL;
}

static inline long stats_obj_get(const struct stats_obj *o, const char *key)
{
	return stats_find_number(o->begin, o->end, key);
}

/* One number of one cache, from a dump made now; STATS_MISSING if the
 * cache or the key is not there. */
static inline long stats_cache_get(const char *name_json, const char *key)
{
	char *json = stats_json_dump();
	struct stats_obj o;
	long v = STATS_MISSING;

	if (json && stats_json_cache(json, name_json, &o))
		v = stats_obj_get(&o, key);
	free(json);
	return v;
}

/* The parts of the account of committed memory (docs/stats.md, "Where the
 * committed memory is"): together, total_committed_bytes. */
static const char *const stats_account_parts[] = {
	"objects_bytes", "cached_bytes", "slab_free_bytes", "large_bytes", "large_kept_bytes", "huge_bytes",
	"huge_cached_bytes", "startup_arena_cut_bytes", "dirty_bytes", "segment_header_bytes",
	"metadata_bytes",
};

/* The parts' sum; STATS_MISSING (and a line on stderr) if one is missing. */
static inline long stats_account_sum(const char *json)
{
	long sum = 0;

	for (size_t i = 0; i < sizeof(stats_account_parts) / sizeof(stats_account_parts[0]); i++) {
		long v = stats_json_top(json, stats_account_parts[i]);

		if (v == STATS_MISSING || v < 0) {
			fprintf(stderr, "JSON: no account part %s\n", stats_account_parts[i]);
			return STATS_MISSING;
		}
		sum += v;
	}
	return sum;
}

/* Sum of the counters by which objects are freed. */
static inline long stats_obj_frees(const struct stats_obj *o)
{
	return stats_obj_get(o, "free_fast") + stats_obj_get(o, "free_local") +
	       stats_obj_get(o, "free_remote");
}

static inline long stats_obj_allocs(const struct stats_obj *o)
{
	return stats_obj_get(o, "alloc_fast") + stats_obj_get(o, "alloc_slow");
}

#endif
