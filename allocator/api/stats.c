/* SPDX-License-Identifier: MIT */
/*
 * stats.c - the statistics report: a table for people, JSON for tools.
 *
 * Both are written through a small buffer with write(2) (or to a FILE),
 * so a report at exit or on a signal allocates nothing. A signal only asks
 * (deferred work, platform.h); the next allocation slow path of any thread
 * writes the report, outside every allocator lock (a handler that took the
 * locks could deadlock against the thread it interrupted).
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

/* ---- the table ------------------------------------------------------------------ */

static void table_row(const struct cache_report *r, void *arg)
{
	struct out *o = arg;
	const long *st = r->stat;

	out_printf(o, "%-18s %7zu %5zu %6zu %5zu %9ld %11ld %9ld %11ld %11ld %9ld %7ld %7ld %6ld\n",
		   r->name, r->object_size, r->objects_per_slab, r->slabs, r->partial_slabs,
		   r->live_objects, st[STAT_ALLOC_FAST], st[STAT_ALLOC_SLOW],
		   st[STAT_FREE_FAST] + st[STAT_FREE_LOCAL], st[STAT_FREE_REMOTE],
		   st[STAT_CPU_PARTIAL_PUT], st[STAT_NEW_SLAB], st[STAT_SLAB_FREED],
		   st[STAT_DWCAS_RETRY]);
}

static void write_table(struct out *o)
{
	struct uslab_mallinfo mi = uslab_mallinfo();

	out_printf(o, "uslab statistics (dwcas: %s), pid %d, %s\n", dwcas_path_name(), (int)getpid(),
		   program_invocation_short_name);
	out_printf(o, "  mapped %zu bytes in segments, %zu committed, %zu in use; "
		      "%zu huge blocks, %zu bytes\n",
		   segment_mapped_bytes(), segment_committed_bytes(), mi.uordblks, mi.hblks,
		   mi.hblkhd);
	out_printf(o, "  start-up arena: %zu bytes cut, %zu in live blocks (%s)\n",
		   arena_cut_bytes(), arena_live_bytes(),
		   READ_ONCE(kmalloc_arena_on) ? "serving" : "ended");
	out_printf(o, "%-18s %7s %5s %6s %5s %9s %11s %9s %11s %11s %9s %7s %7s %6s\n", "cache",
		   "objsize", "/slab", "slabs", "part", "live", "alloc_fast", "alloc_slow",
		   "free_own", "free_remote", "cpu_part", "new", "freed", "retry");
	caches_for_each_report(table_row, o);
	out_flush(o);
}

/* ---- JSON ------------------------------------------------------------------------- */

struct json_walk {
	struct out *o;
	int n;
};

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

static void json_cache(const struct cache_report *r, void *arg)
{
	char name[6 * sizeof(((struct uslab_cache *)0)->name) + 1];
	struct json_walk *w = arg;
	struct out *o = w->o;
	size_t memory = r->slabs * r->slab_bytes;
	size_t used = (size_t)(r->live_objects > 0 ? r->live_objects : 0) * r->object_size;

	out_printf(o, "%s\n    {\"name\": \"%s\", \"size\": %zu, \"object_size\": %zu, "
		      "\"objects_per_slab\": %zu, \"slab_bytes\": %zu, \"slabs\": %zu, "
		      "\"partial_slabs\": %zu, \"live_objects\": %ld, \"memory_bytes\": %zu, "
		      "\"used_bytes\": %zu, \"waste_bytes\": %zu",
		   w->n++ ? "," : "", json_escape(r->name, name, sizeof(name)), r->size,
		   r->object_size, r->objects_per_slab,
		   r->slab_bytes, r->slabs, r->partial_slabs, r->live_objects, memory, used,
		   memory > used ? memory - used : 0);
#define X(id, name, doc) out_printf(o, ", \"" name "\": %ld", r->stat[STAT_##id]);
	USLAB_CACHE_STATS(X)
#undef X
	out_printf(o, "}");
}

static void write_json(struct out *o)
{
	struct uslab_mallinfo mi = uslab_mallinfo();
	struct json_walk w = { o, 0 };

	char prog[6 * 32 + 1];

	out_printf(o, "{\n  \"uslab_version\": \"%d.%d\",\n  \"dwcas\": \"%s\",\n"
		      "  \"pid\": %d,\n  \"program\": \"%s\",\n",
		   USLAB_VERSION_MAJOR, USLAB_VERSION_MINOR, dwcas_path_name(), (int)getpid(),
		   json_escape(program_invocation_short_name, prog, sizeof(prog)));
	out_printf(o, "  \"mapped_bytes\": %zu,\n  \"committed_bytes\": %zu,\n"
		      "  \"in_use_bytes\": %zu,\n  \"huge_blocks\": %zu,\n  \"huge_bytes\": %zu,\n"
		      "  \"huge_cached_bytes\": %zu,\n"
		      "  \"startup_arena_cut_bytes\": %zu,\n  \"startup_arena_live_bytes\": %zu,\n",
		   mi.arena, segment_committed_bytes(), mi.uordblks, mi.hblks, mi.hblkhd,
		   range_cache_bytes(), arena_cut_bytes(), arena_live_bytes());
	out_printf(o, "  \"caches\": [");
	caches_for_each_report(json_cache, &w);
	out_printf(o, "\n  ]\n}\n");
	out_flush(o);
}

USLAB_API void uslab_stats_print(FILE *f)
{
	struct out o = { .fd = -1, .f = f };

	write_table(&o);
	fflush(f);
}

USLAB_API void uslab_stats_json(FILE *f)
{
	struct out o = { .fd = -1, .f = f };

	write_json(&o);
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

/* JSON to USLAB_STATS_FILE (replaced whole), else the table on stderr. */
static void stats_dump(bool table_too)
{
	const char *pattern = option_str(OPT_STATS_FILE);
	char buf[4096], *path = pattern ? buf : NULL;
	struct out o = { .fd = stats_fd };

	if (pattern && !stats_path(pattern, buf, sizeof(buf))) {
		struct out e = { .fd = stats_fd };
		out_printf(&e, "uslab: USLAB_STATS_FILE is too long: %s\n", pattern);
		out_flush(&e);
		path = NULL;
		table_too = false;
	}

	if (table_too || !path)
		write_table(&o);
	if (path) {
		o.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (o.fd < 0) {
			struct out e = { .fd = stats_fd };
			out_printf(&e, "uslab: cannot write statistics to %s\n", path);
			out_flush(&e);
			return;
		}
		write_json(&o);
		close(o.fd);
	}
}

static void stats_signalled(void)
{
	stats_dump(false);
}

static void stats_signal(int sig)
{
	(void)sig;
	WRITE_ONCE(deferred_pending, 1);
}

void stats_init(void)
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

__attribute__((destructor)) static void stats_at_exit(void)
{
	if (option(OPT_STATS) || option_str(OPT_STATS_FILE))
		stats_dump(option(OPT_STATS));
}
