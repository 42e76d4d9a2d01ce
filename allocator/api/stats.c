/* SPDX-License-Identifier: MIT */
/*
 * stats.c - the statistics report: a table for people, JSON for tools.
 *
 * A report is gathered (struct report: the caches' rows, sorted, and an
 * account of the committed memory from one walk of the segments), then
 * written through a small buffer with write(2) (or to a FILE). The report
 * at exit or from a call takes the usual locks; the one a signal asks for
 * is written by the handler itself, from what it can read without them
 * (see "the signal" below).
 */
#define _GNU_SOURCE
#include "api.h"
#include "options.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct out {
	int fd;
	FILE *f;
	size_t len;
	char buf[4096];
};

static void out_flush(struct out *o)
{
	size_t done = 0;

	if (o->f) {
		fwrite(o->buf, 1, o->len, o->f);
	} else {
		while (done < o->len) {
			ssize_t n = write(o->fd, o->buf + done, o->len - done);
			if (n <= 0)
				break;
			done += (size_t)n;
		}
	}
	o->len = 0;
}

__attribute__((format(printf, 2, 3)))
static void out_printf(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(o->buf + o->len, sizeof(o->buf) - o->len, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(o->buf) - o->len) {   /* did not fit: flush, redo */
		out_flush(o);
		va_start(ap, fmt);
		n = vsnprintf(o->buf, sizeof(o->buf), fmt, ap);
		va_end(ap);
		if (n < 0)
			return;
		if ((size_t)n >= sizeof(o->buf))
			n = sizeof(o->buf) - 1;
	}
	o->len += (size_t)n;
}

/* ---- numbers for people ------------------------------------------------------------ */


/* Bytes with a binary unit and one decimal, from integers only (the signal
 * path formats no floating point): "512 B", "16.0 KiB", "3.5 MiB". */
const char *human(char buf[HUMAN_LEN], size_t n)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	size_t div = 1;
	int u = 0;

	if (n < 1024) {
		snprintf(buf, HUMAN_LEN, "%zu B", n);
		return buf;
	}
	while (u < 4 && n / div >= 1024) {
		div *= 1024;
		u++;
	}
	size_t tenths = n / div * 10 + (n % div * 10 + div / 2) / div;
	snprintf(buf, HUMAN_LEN, "%zu.%zu %s", tenths / 10, tenths % 10, unit[u]);
	return buf;
}

/* part in % of whole, one decimal ("-" when whole is 0) */
static const char *percent(char buf[HUMAN_LEN], size_t part, size_t whole)
{
	if (!whole) {
		snprintf(buf, HUMAN_LEN, "-");
		return buf;
	}
	size_t pm = (part * 1000 + whole / 2) / whole;
	snprintf(buf, HUMAN_LEN, "%zu.%zu%%", pm / 10, pm % 10);
	return buf;
}

/* ---- what a report says ---------------------------------------------------------------
 *
 * Gathered first, then written as the table or the JSON: the rows sorted,
 * and every byte of the account taken from one walk of the segments, so its
 * parts add up to its total.
 */

enum row_kind { ROW_CACHE, ROW_LARGE, ROW_HUGE, ROW_ARENA };

struct row {
	char name[sizeof(((struct uslab_cache *)0)->name)];
	enum row_kind kind;
	unsigned id;                   /* a cache's (the signal's walk) */
	size_t size, object_size, objects_per_slab, slab_bytes;
	size_t slabs, partial_slabs;
	long live;                     /* objects, or blocks (large, huge) */
	size_t memory, used;
	long cached_objects;           /* free, on threads' own lists (cache.h) */
	size_t cached;                 /* ... in bytes */
	long stat[NR_CACHE_STATS];
};

struct report {
	const char *origin;            /* "exit", "call", "signal" */
	struct seg_account seg;
	size_t objects_bytes;          /* slab slots counted in use: inuse x stride */
	size_t cached_bytes;           /* free slots on threads' own lists */
	size_t huge_blocks, huge_bytes, huge_kept, arena_cut, arena_live;
	size_t meta_mapped, meta_committed;   /* metadata outside segments */
	size_t mapped;                 /* segments mapped + what the arena has cut */
	size_t in_use;                 /* mallinfo2's uordblks */
	bool arena_on;
	struct row *rows;
	size_t nrows, cap, ncaches;
};

static size_t report_total(const struct report *r)
{
	return r->seg.committed_bytes + r->huge_bytes + r->huge_kept + r->arena_cut +
	       r->meta_committed;
}

/* The slabs' bytes neither in use nor cached by threads. */
static size_t report_slab_free(const struct report *r)
{
	size_t taken = r->objects_bytes + r->cached_bytes;

	return r->seg.slab_bytes > taken ? r->seg.slab_bytes - taken : 0;
}

static bool row_before(const struct row *a, const struct row *b)
{
	if (a->memory != b->memory)
		return a->memory > b->memory;
	return strcmp(a->name, b->name) < 0;
}

/* Largest memory first (ties by name): a shell sort, in place, no memory. */
static void rows_sort(struct row *rows, size_t n)
{
	for (size_t gap = n / 2; gap; gap = gap == 2 ? 1 : gap * 5 / 11) {
		for (size_t i = gap; i < n; i++) {
			struct row t = rows[i];
			size_t j = i;

			for (; j >= gap && row_before(&t, &rows[j - gap]); j -= gap)
				rows[j] = rows[j - gap];
			rows[j] = t;
		}
	}
}

static struct row *row_add(struct report *r, const char *name, enum row_kind kind)
{
	if (r->nrows >= r->cap)
		return NULL;
	struct row *w = &r->rows[r->nrows++];

	memset(w, 0, sizeof(*w));
	snprintf(w->name, sizeof(w->name), "%s", name);
	w->kind = kind;
	return w;
}

/* The rows for what is not in a cache: large and huge blocks, the arena. */
static void rows_add_blocks(struct report *r)
{
	struct row *w;

	if (r->seg.large_runs && (w = row_add(r, "large blocks", ROW_LARGE))) {
		w->live = (long)r->seg.large_runs;
		w->memory = w->used = r->seg.large_bytes;
	}
	if (r->huge_blocks && (w = row_add(r, "huge blocks", ROW_HUGE))) {
		w->live = (long)r->huge_blocks;
		w->memory = w->used = r->huge_bytes;
	}
	if (r->arena_cut && (w = row_add(r, "start-up arena", ROW_ARENA))) {
		w->live = -1;   /* blocks not counted */
		w->memory = r->arena_cut;
		w->used = r->arena_live;
	}
}

/* The metadata outside segments: read before the report makes its own. */
static void report_meta(struct report *r)
{
	r->meta_mapped = meta_mapped_bytes();
	r->meta_committed = meta_committed_bytes();
	if (r->meta_committed > r->meta_mapped)   /* read a moment apart */
		r->meta_committed = r->meta_mapped;
}

/* Everything outside the caches' rows and the metadata: atomics and a walk. */
static bool report_totals(struct report *r, void (*head_fn)(struct slab *, void *), bool try)
{
	r->objects_bytes = 0;
	if (!segment_account(&r->seg, head_fn, r, try))
		return false;
	r->huge_blocks = kmalloc_huge_count();
	r->huge_bytes = kmalloc_huge_bytes();
	r->huge_kept = range_cache_bytes();
	r->arena_cut = arena_held_bytes();
	r->arena_live = arena_live_bytes();
	r->arena_on = READ_ONCE(kmalloc_arena_on);
	r->mapped = segment_mapped_bytes() + r->arena_cut;
	return true;
}

static void cache_row(const struct cache_report *c, void *arg)
{
	struct report *r = arg;
	struct row *w = row_add(r, c->name, ROW_CACHE);

	if (!w)
		return;
	w->size = c->size;
	w->object_size = c->object_size;
	w->objects_per_slab = c->objects_per_slab;
	w->slab_bytes = c->slab_bytes;
	w->slabs = c->slabs;
	w->partial_slabs = c->partial_slabs;
	w->live = c->live_objects;
	w->memory = c->slabs * c->slab_bytes;
	w->used = (size_t)(c->live_objects > 0 ? c->live_objects : 0) * c->object_size;
	w->cached_objects = c->cached_objects > 0 ? c->cached_objects : 0;
	w->cached = (size_t)w->cached_objects * c->object_size;
	memcpy(w->stat, c->stat, sizeof(w->stat));
	r->ncaches++;
}

/* The whole report, from a thread (exit, a call, the deferred signal):
 * every cache's counters; may take locks and allocate metadata. */
static bool report_gather(struct report *r, const char *origin)
{
	memset(r, 0, sizeof(*r));
	r->origin = origin;
	report_meta(r);   /* first: the report's rows and lists are not the program's */
	r->cap = MAX_CACHES + 3;
	r->rows = meta_alloc(r->cap * sizeof(*r->rows));
	if (!r->rows)
		return false;
	caches_for_each_report(cache_row, r);
	r->in_use = uslab_mallinfo().uordblks;
	report_totals(r, NULL, false);
	/* objects in use as the rows count them: threads' cached objects are
	 * free (other threads' as they last published them: docs/stats.md) */
	for (size_t i = 0; i < r->nrows; i++) {
		r->objects_bytes += r->rows[i].used;
		r->cached_bytes += r->rows[i].cached;
	}
	if (r->objects_bytes > r->seg.slab_bytes)   /* rows and walk a moment apart */
		r->objects_bytes = r->seg.slab_bytes;
	if (r->cached_bytes > r->seg.slab_bytes - r->objects_bytes)
		r->cached_bytes = r->seg.slab_bytes - r->objects_bytes;
	rows_add_blocks(r);
	rows_sort(r->rows, r->nrows);
	return true;
}

static void report_release(struct report *r)
{
	meta_free(r->rows, r->cap * sizeof(*r->rows));
}

/* ---- the table ------------------------------------------------------------------ */

static void write_account(struct out *o, const struct report *r)
{
	char b[HUMAN_LEN], p[HUMAN_LEN], extra[HUMAN_LEN];   /* one buffer per argument */
	size_t total = report_total(r);
	const struct seg_account *a = &r->seg;
	size_t slab_free = report_slab_free(r);

#define LINE(label, bytes, fmt, ...)                                                         \
	out_printf(o, "  %-22s %12s %6s  " fmt "\n", label, human(b, bytes),               \
		   percent(p, bytes, total), __VA_ARGS__)
	out_printf(o, "  %-22s %12s %6s  %s\n", "memory committed", human(b, total), "100%",
		   "where it is:");
	LINE("objects in use", r->objects_bytes, "%s", "live objects in slabs");
	LINE("cached by threads", r->cached_bytes, "%s",
	     "free objects threads keep for reuse (other threads': at their last slow path)");
	LINE("free in slabs", slab_free, "%s", "free object slots and slab tails");
	LINE("large blocks", a->large_bytes, "%zu live, of 32 KiB to 2 MiB each", a->large_runs);
	LINE("large, kept", a->kept_bytes, "%s", "freed large blocks threads keep for reuse");
	LINE("huge blocks", r->huge_bytes, "%zu live, above 2 MiB, each its own mapping",
	     r->huge_blocks);
	LINE("huge, kept", r->huge_kept, "%s", "freed huge mappings kept for reuse");
	LINE("start-up arena", r->arena_cut, "%s in live blocks; %s", human(extra, r->arena_live),
	     r->arena_on ? "serving" : "ended");
	LINE("free, not returned", a->dirty_bytes, "%s",
	     "free units still committed, for reuse; decay returns them (USLAB_DECAY_MS)");
	LINE("segment headers", a->header_bytes, "allocator metadata, 48 KiB in each of %zu "
	     "segments", a->segments);
	LINE("metadata", r->meta_committed, "%s",
	     "thread heaps, caches, remote-free messages: pages touched, outside segments");
#undef LINE
	out_printf(o, "  (not committed: %s of segments never touched or already returned; %s of "
		      "metadata mappings never touched)\n",
		   human(b, a->clean_bytes), human(extra, r->meta_mapped - r->meta_committed));
}

/* One line of the table: counts below 0, and the counters when not
 * counted, print as "-". */
struct line {
	const char *name;
	long objsize, live, slots, slabs;
	size_t memory, used;
	bool counted;
	long allocs, frees, remote;
};

static const char *count_text(char buf[24], long v)
{
	snprintf(buf, 24, v < 0 ? "-" : "%ld", v);
	return buf;
}

#define TABLE_FMT "%-18s %7s %9s %9s %6s %11s %11s %6s %11s %11s %7s\n"

static void table_line(struct out *o, const struct line *l)
{
	char osz[24], live[24], slots[24], slabs[24], al[24], fe[24];
	char mem[HUMAN_LEN], used[HUMAN_LEN], free[HUMAN_LEN], rem[HUMAN_LEN];
	size_t in_use = l->used < l->memory ? l->used : l->memory;

	if (l->counted)
		percent(rem, (size_t)(l->remote > 0 ? l->remote : 0),
			(size_t)(l->frees > 0 ? l->frees : 0));
	else
		snprintf(rem, sizeof(rem), "-");
	out_printf(o, TABLE_FMT, l->name, l->objsize ? count_text(osz, l->objsize) : "",
		   count_text(live, l->live), count_text(slots, l->slots),
		   count_text(slabs, l->slabs), human(mem, l->memory), human(used, l->used),
		   percent(free, l->memory - in_use, l->memory),
		   count_text(al, l->counted ? l->allocs : -1),
		   count_text(fe, l->counted ? l->frees : -1), rem);
}

static void write_rows(struct out *o, const struct report *r)
{
	struct line total = { .name = "total", .counted = true };

	out_printf(o, TABLE_FMT, "name", "objsize", "live", "slots", "slabs", "memory", "in use",
		   "free", "allocs", "frees", "remote");
	for (size_t i = 0; i < r->nrows; i++) {
		const struct row *w = &r->rows[i];
		const long *st = w->stat;
		bool cache = w->kind == ROW_CACHE;
		struct line l = {
			.name = w->name,
			.objsize = cache ? (long)w->object_size : -1,
			.live = w->live,
			.slots = cache ? (long)(w->slabs * w->objects_per_slab) : -1,
			.slabs = cache ? (long)w->slabs : -1,
			.memory = w->memory,
			.used = w->used,
			.counted = cache,
			.allocs = st[STAT_ALLOC_FAST] + st[STAT_ALLOC_SLOW],
			.frees = st[STAT_FREE_FAST] + st[STAT_FREE_LOCAL] + st[STAT_FREE_REMOTE],
			.remote = st[STAT_FREE_REMOTE] + st[STAT_FOREIGN_FLUSHED],
		};

		table_line(o, &l);
		total.live += l.live > 0 ? l.live : 0;
		total.slots += l.slots > 0 ? l.slots : 0;
		total.slabs += l.slabs > 0 ? l.slabs : 0;
		total.memory += l.memory;
		total.used += l.used < l.memory ? l.used : l.memory;
		if (l.counted) {
			total.allocs += l.allocs;
			total.frees += l.frees;
			total.remote += l.remote;
		}
	}
	table_line(o, &total);
}

static const char legend[] =
	"columns: objsize bytes per object slot; live objects allocated and not freed (blocks,\n"
	"  for large and huge), not those threads keep cached (another thread's as its slow\n"
	"  paths last counted them: off by what its fast paths did since);\n"
	"  slots object slots in the slabs; memory bytes in slabs (or blocks); in use live x\n"
	"  objsize; free share of memory not in use; allocs, frees since start; remote share\n"
	"  of frees that went back to a slab by an atomic operation (another thread's slab,\n"
	"  or one this thread gave up). docs/stats.md has the details.\n";

/* USLAB_STATS_VERBOSE: every counter of every cache, by its JSON name. */
static void write_counters(struct out *o, const struct report *r)
{
	static const char *const names[NR_CACHE_STATS] = {
#define X(id, name, doc) [STAT_##id] = name,
		USLAB_CACHE_STATS(X)
#undef X
	};

	out_printf(o, "counters (docs/stats.md):\n");
	for (size_t i = 0; i < r->nrows; i++) {
		const struct row *w = &r->rows[i];

		if (w->kind != ROW_CACHE)
			continue;
		out_printf(o, "%s: slabs %zu, partial %zu, slab %zu bytes for %zu objects;", w->name,
			   w->slabs, w->partial_slabs, w->slab_bytes, w->objects_per_slab);
		for (int k = 0; k < NR_CACHE_STATS; k++)
			out_printf(o, " %s %ld", names[k], w->stat[k]);
		out_printf(o, "\n");
	}
}

static void write_table(struct out *o, const struct report *r)
{
	out_printf(o, "uslab statistics (dwcas: %s), pid %d, %s%s\n", dwcas_path_name(),
		   (int)getpid(), program_invocation_short_name,
		   strcmp(r->origin, "signal") ? "" : " (live snapshot)");
	write_account(o, r);
	write_rows(o, r);
	out_printf(o, "%s", legend);
	if (option(OPT_STATS_VERBOSE))
		write_counters(o, r);
	out_flush(o);
}

/* ---- JSON ------------------------------------------------------------------------- */

/* A cache name as a JSON string body: quotes, backslashes and control
 * characters escaped (names come from uslab_cache_create callers). */
static const char *json_escape(const char *in, char *out, size_t size)
{
	size_t o = 0;

	for (; *in && o + 7 < size; in++) {
		unsigned char ch = (unsigned char)*in;

		if (ch == '"' || ch == '\\') {
			out[o++] = '\\';
			out[o++] = (char)ch;
		} else if (ch < 0x20) {
			o += (size_t)snprintf(out + o, size - o, "\\u%04x", ch);
		} else {
			out[o++] = (char)ch;
		}
	}
	out[o] = 0;
	return out;
}

static void json_cache(struct out *o, const struct report *r, const struct row *w, int n)
{
	char name[6 * sizeof(w->name) + 1];

	out_printf(o, "%s\n    {\"name\": \"%s\", \"size\": %zu, \"object_size\": %zu, "
		      "\"objects_per_slab\": %zu, \"slab_bytes\": %zu, \"slabs\": %zu, "
		      "\"partial_slabs\": %zu, \"live_objects\": %ld, \"cached_objects\": %ld, "
		      "\"memory_bytes\": %zu, \"used_bytes\": %zu, \"waste_bytes\": %zu",
		   n ? "," : "", json_escape(w->name, name, sizeof(name)), w->size,
		   w->object_size, w->objects_per_slab, w->slab_bytes, w->slabs, w->partial_slabs,
		   w->live, w->cached_objects, w->memory, w->used,
		   w->memory > w->used ? w->memory - w->used : 0);
#define X(id, name, doc) out_printf(o, ", \"" name "\": %ld", w->stat[STAT_##id]);
	USLAB_CACHE_STATS(X)
#undef X
	out_printf(o, "}");
}

static void write_json(struct out *o, const struct report *r)
{
	const struct seg_account *a = &r->seg;
	char prog[6 * 32 + 1];
	struct timespec now;   /* clock_gettime is async-signal-safe */
	int n = 0;

	clock_gettime(CLOCK_REALTIME, &now);
	out_printf(o, "{\n  \"uslab_version\": \"%d.%d\",\n  \"dwcas\": \"%s\",\n"
		      "  \"pid\": %d,\n  \"program\": \"%s\",\n  \"report\": \"%s\",\n"
		      "  \"time_ms\": %lld,\n",
		   USLAB_VERSION_MAJOR, USLAB_VERSION_MINOR, dwcas_path_name(), (int)getpid(),
		   json_escape(program_invocation_short_name, prog, sizeof(prog)), r->origin,
		   (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000);
	out_printf(o, "  \"mapped_bytes\": %zu,\n  \"committed_bytes\": %zu,\n"
		      "  \"in_use_bytes\": %zu,\n  \"huge_blocks\": %zu,\n  \"huge_bytes\": %zu,\n"
		      "  \"huge_cached_bytes\": %zu,\n"
		      "  \"startup_arena_cut_bytes\": %zu,\n  \"startup_arena_live_bytes\": %zu,\n"
		      "  \"large_blocks\": %zu,\n  \"segments\": %zu,\n",
		   r->mapped, a->committed_bytes, r->in_use, r->huge_blocks, r->huge_bytes,
		   r->huge_kept, r->arena_cut, r->arena_live, a->large_runs, a->segments);
	out_printf(o, "  \"total_committed_bytes\": %zu,\n  \"objects_bytes\": %zu,\n"
		      "  \"cached_bytes\": %zu,\n"
		      "  \"slab_free_bytes\": %zu,\n  \"large_bytes\": %zu,\n"
		      "  \"large_kept_bytes\": %zu,\n  \"dirty_bytes\": %zu,\n"
		      "  \"segment_header_bytes\": %zu,\n  \"metadata_bytes\": %zu,\n"
		      "  \"unused_mapped_bytes\": %zu,\n  \"metadata_mapped_bytes\": %zu,\n",
		   report_total(r), r->objects_bytes, r->cached_bytes, report_slab_free(r),
		   a->large_bytes, a->kept_bytes, a->dirty_bytes, a->header_bytes,
		   r->meta_committed, a->clean_bytes, r->meta_mapped);
	out_printf(o, "  \"caches\": [");
	for (size_t i = 0; i < r->nrows; i++)
		if (r->rows[i].kind == ROW_CACHE)
			json_cache(o, r, &r->rows[i], n++);
	out_printf(o, "\n  ]\n}\n");
	out_flush(o);
}

USLAB_API void uslab_stats_print(FILE *f)
{
	struct out o = { .fd = -1, .f = f };
	struct report r;

	if (!report_gather(&r, "call"))
		return;
	write_table(&o, &r);
	report_release(&r);
	fflush(f);
}

USLAB_API void uslab_stats_json(FILE *f)
{
	struct out o = { .fd = -1, .f = f };
	struct report r;

	if (!report_gather(&r, "call"))
		return;
	write_json(&o, &r);
	report_release(&r);
	fflush(f);
}

/* stderr as it was at start-up: a program may close fd 2 in an atexit
 * handler (coreutils' close_stdout), which runs before our destructor. */
static int stats_fd = 2;

/* USLAB_STATS_FILE with each %p replaced by the process id (and %% by %),
 * so that the processes of a tree write a file each. false: too long. */
static bool stats_path(const char *pattern, char *path, size_t size)
{
	size_t n = 0;

	for (const char *s = pattern; *s; s++) {
		int w;

		if (s[0] == '%' && (s[1] == 'p' || s[1] == '%')) {
			w = s[1] == 'p' ? snprintf(path + n, size - n, "%d", (int)getpid()) :
					  snprintf(path + n, size - n, "%%");
			s++;
		} else {
			w = snprintf(path + n, size - n, "%c", *s);
		}
		if (w < 0 || (size_t)w >= size - n)
			return false;
		n += (size_t)w;
	}
	return true;
}

static void say(const char *fmt, const char *arg)
{
	struct out e = { .fd = stats_fd };

	out_printf(&e, fmt, arg);
	out_flush(&e);
}

/* The JSON to path, whole: written beside it and renamed over it, so that a
 * reader (uslabinfo --watch) never sees half a report. */
static void write_json_file(const char *path, const struct report *r)
{
	static atomic_long_t writes;   /* each writer its own name: a handler may
					  interrupt one, a thread race another */
	char tmp[4096 + 48];
	struct out o;

	snprintf(tmp, sizeof(tmp), "%s.%d.%ld.tmp", path, (int)getpid(),
		 atomic_long_inc_return_relaxed(&writes));
	o = (struct out){ .fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) };
	if (o.fd < 0) {
		say("uslab: cannot write statistics to %s\n", path);
		return;
	}
	write_json(&o, r);
	close(o.fd);
	if (rename(tmp, path) != 0) {
		unlink(tmp);
		say("uslab: cannot write statistics to %s\n", path);
	}
}

/* Where a report goes: USLAB_STATS_FILE (expanded into buf), or NULL for
 * the table on stderr. */
static const char *stats_target(char *buf, size_t size)
{
	const char *pattern = option_str(OPT_STATS_FILE);

	if (!pattern)
		return NULL;
	if (!stats_path(pattern, buf, size)) {
		say("uslab: USLAB_STATS_FILE is too long: %s\n", pattern);
		return NULL;
	}
	return buf;
}

/* JSON to USLAB_STATS_FILE, else the table on stderr (and the table too
 * when table_too). */
static cold void stats_dump(const char *origin, bool table_too)
{
	char buf[4096];
	const char *path = stats_target(buf, sizeof(buf));
	struct out o = { .fd = stats_fd };
	struct report r;

	if (!report_gather(&r, origin))
		return;
	if (table_too || !path)
		write_table(&o, &r);
	if (path)
		write_json_file(path, &r);
	report_release(&r);
}

/* ---- the signal ------------------------------------------------------------------------
 *
 * The handler writes a report itself, at once, whatever the process is
 * doing: an idle process answers too. It takes no allocator lock that the
 * thread it interrupted might hold, and allocates nothing:
 *  - occupancy comes from one walk of the segments (segment_account with
 *    try: seg_lock is tried for about 20 ms, never waited on) - each slab's
 *    word gives its objects in use, its cache (alive while its slab is,
 *    and the slab while seg_lock is held) its name and geometry;
 *  - a cache's counters are summed when its first slab is seen, from the
 *    cache's atomics and every heap's row (cache_report_counters: the heap
 *    list is walked without heaps_lock, each row read with single loads);
 *    malloc's static caches, which live for good, get a row for their
 *    counters even when they have no slab left, as in the other reports;
 *  - the totals are atomics and single words (huge blocks, kept ranges,
 *    the arena), and the metadata's pages (meta_committed_bytes);
 *  - the rows are gathered in a static table (zero pages until first
 *    used), formatted with snprintf's integer and string conversions only
 *    (no floating point, no positional arguments: glibc then takes no lock
 *    and allocates nothing) and written with open/write/rename.
 * What threads have not folded into their rows yet (allocations since their
 * last refill, and the reporting thread's too: the handler may have
 * interrupted it mid-fold) is missing; docs/stats.md says how much. When
 * seg_lock stays busy (a thread is inside the allocator, perhaps the one
 * interrupted), the handler leaves the snapshot to the next slow path of
 * any thread (deferred work; one is near, since a thread is in the
 * allocator), which waits for the lock. Either way the report is the same
 * snapshot: written from a slow path, it reads and changes nothing more
 * than from the handler.
 */
static struct row snap_rows[MAX_CACHES + 3];
static uint16_t snap_index[MAX_CACHES];   /* cache id -> 1 + its row, 0: none yet */
_Static_assert(MAX_CACHES + 3 <= UINT16_MAX, "a row's number fits snap_index");
static int snap_busy;

/* A row in the snapshot for s, from c (geometry and counters, no slab yet);
 * NULL when the table is full. */
static struct row *snap_row_add(struct report *r, const struct uslab_cache *s,
				const struct cache_report *c)
{
	size_t n = r->nrows;

	cache_row(c, r);
	if (r->nrows == n)
		return NULL;
	snap_index[s->id] = (uint16_t)r->nrows;
	r->rows[n].id = s->id;
	/* every thread's, the interrupted one's too: published whole, the
	 * handler reads one word per thread (snap_cached bounds the sum) */
	r->rows[n].cached_objects = cache_cached_published(s, NULL);
	return &r->rows[n];
}

/* s's row in the snapshot, made the first time s is seen. */
static struct row *snap_row(struct report *r, const struct uslab_cache *s)
{
	struct cache_report c;

	if (snap_index[s->id])
		return &r->rows[snap_index[s->id] - 1];
	cache_report_counters(s, &c);
	return snap_row_add(r, s, &c);
}

/* Slab heads during the signal's walk: each cache's row, made when its
 * first slab is seen (s is alive while the slab is, under seg_lock). */
static void snap_head(struct slab *head, void *arg)
{
	struct report *r = arg;
	struct uslab_cache *s = READ_ONCE(head->cache);

	if (READ_ONCE(head->kind) != SLAB_KIND_SLAB || !s || s->id >= MAX_CACHES)
		return;
	size_t inuse = ctr_inuse(dwcas_read(&head->xword).hi);
	struct row *w = snap_row(r, s);

	if (!w)
		return;
	r->objects_bytes += inuse * s->stride;
	w->slabs++;
	w->live += (long)inuse;
	w->memory += w->slab_bytes;
	w->used += inuse * s->stride;
}

/* After the walk: each cache's cached objects, as threads published them,
 * move from in use to cached, at most what the slabs' words have out. */
static void snap_cached(struct report *r)
{
	for (size_t i = 0; i < r->nrows; i++) {
		struct row *w = &r->rows[i];
		long n = w->cached_objects < w->live ? w->cached_objects : w->live;

		w->cached_objects = n > 0 ? n : 0;
		w->cached = (size_t)w->cached_objects * w->object_size;
		w->live -= w->cached_objects;
		w->used -= w->cached;
		r->objects_bytes -= w->cached;
		r->cached_bytes += w->cached;
	}
}

/* The snapshot: try (the handler) leaves it to the next slow path when
 * seg_lock stays busy; from there (deferred work) it waits for the lock. */
static void stats_snapshot(bool try)
{
	char buf[4096];
	const char *path;
	struct report r = { .origin = "signal", .rows = snap_rows, .cap = MAX_CACHES + 3 };
	struct out o = { .fd = stats_fd };
	bool walked;

	report_meta(&r);
	walked = report_totals(&r, snap_head, try);

	/* malloc's caches that served allocations and have no slab now: they
	 * live for good, so their counters may be read after the walk too */
	uint64_t ready = smp_load_acquire(&kmalloc_statics.ready);   /* pairs with their setup's release */
	for (unsigned k = 0; walked && k < NR_CLASSES; k++) {
		const struct uslab_cache *s = &kmalloc_store[k];
		struct cache_report c;

		if (!(ready >> k & 1) || snap_index[s->id])
			continue;
		cache_report_counters(s, &c);
		if (c.stat[STAT_ALLOC_FAST] + c.stat[STAT_ALLOC_SLOW] > 0)
			snap_row_add(&r, s, &c);
	}
	for (size_t i = 0; i < r.nrows; i++)   /* the index is clear for the next one */
		snap_index[snap_rows[i].id] = 0;
	if (!walked) {
		WRITE_ONCE(deferred_pending, 1);
		return;
	}
	/* as mallinfo2 counts it: every slot a slab's word has out */
	r.in_use = r.objects_bytes + r.seg.large_bytes + r.arena_live;
	snap_cached(&r);
	rows_add_blocks(&r);
	rows_sort(r.rows, r.nrows);
	path = stats_target(buf, sizeof(buf));
	if (path)
		write_json_file(path, &r);
	else
		write_table(&o, &r);
}

/*
 * One snapshot at a time (the signal may reach several threads at once,
 * and the deferred one may run beside a handler): snap_busy is 0 (idle),
 * 1 (one being written) or 2 (and asked for again meanwhile: the writer
 * writes another, so that no request is answered by a report that began
 * before it).
 */
static void stats_snapshot_once(bool try)
{
	int idle = 0, running = 1;

	/* acq_rel, both: pair with the writer's release of 0 below */
	if (!try_cmpxchg_acq_rel(&snap_busy, &idle, 1)) {
		for (int seen = idle; seen == 1 && !try_cmpxchg_acq_rel(&snap_busy, &seen, 2);)
			;
		return;
	}
	for (;;) {
		stats_snapshot(try);
		running = 1;
		if (try_cmpxchg_acq_rel(&snap_busy, &running, 0))
			return;
		WRITE_ONCE(snap_busy, 1);   /* it was 2: once more */
	}
}

static void stats_signalled(void)
{
	stats_snapshot_once(false);
}

static void stats_signal(int sig)
{
	int saved = errno;

	(void)sig;
	stats_snapshot_once(true);
	errno = saved;
}

every_process void stats_init(void)
{
	int sig = (int)option(OPT_STATS_SIGNAL);

	if (option(OPT_STATS) || sig > 0 || option_str(OPT_STATS_FILE)) {
		int fd = fcntl(2, F_DUPFD_CLOEXEC, 100);   /* high: out of the program's way */

		if (fd >= 0)
			stats_fd = fd;
	}
	if (sig > 0) {
		struct sigaction sa;

		deferred_register(stats_signalled);
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = stats_signal;
		sa.sa_flags = SA_RESTART;
		sigemptyset(&sa.sa_mask);
		sigaction(sig, &sa, NULL);
	}
}

every_process __attribute__((destructor)) static void stats_at_exit(void)
{
	if (option(OPT_STATS) || option_str(OPT_STATS_FILE))
		stats_dump("exit", option(OPT_STATS));
}
