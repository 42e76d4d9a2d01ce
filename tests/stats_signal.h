/* SPDX-License-Identifier: MIT */
/*
 * stats_signal.h - a test's own statistics signal: USLAB_STATS_SIGNAL=USR2
 * and USLAB_STATS_FILE in a fresh directory, set through the option parser,
 * and the handler installed (stats_init), as a process started with both
 * variables would have them.
 *
 *   struct stats_signal sig;   (in main or static: the options point into it)
 *   stats_signal_setup(&sig, "uslab-my-test");   raise(SIGUSR2) writes sig.path
 *   char *json = stats_signal_snapshot(&sig);    raises it, reads the snapshot
 *   stats_signal_teardown(&sig);                 no report after it, nor at exit
 */
#ifndef USLAB_TEST_STATS_SIGNAL_H
#define USLAB_TEST_STATS_SIGNAL_H

#include "test.h"
#include "api.h"       /* stats_init */
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include "options.h"   /* options_parse_entry, options_reset */

struct stats_signal {
	char dir[96], path[128];
	char opt[160];   /* the option keeps pointing into it */
};

static inline void stats_signal_setup(struct stats_signal *s, const char *name)
{
	snprintf(s->dir, sizeof(s->dir), "/tmp/%s-XXXXXX", name);
	REQUIRE(mkdtemp(s->dir));
	snprintf(s->path, sizeof(s->path), "%s/stats.json", s->dir);
	snprintf(s->opt, sizeof(s->opt), "USLAB_STATS_FILE=%s", s->path);
	options_parse_entry("USLAB_STATS_SIGNAL=USR2");
	options_parse_entry(s->opt);
	stats_init();
}

/* The snapshot a raised signal writes (by the handler, before raise
 * returns), read back and checked to be one: the caller frees it. */
static inline char *stats_signal_snapshot(const struct stats_signal *s)
{
	struct stat st;

	raise(SIGUSR2);
	REQUIRE(stat(s->path, &st) == 0);
	char *json = test_read_file(s->path);
	REQUIRE(json);
	CHECK(strstr(json, "\"report\": \"signal\"") != NULL);
	return json;
}

static inline void stats_signal_teardown(struct stats_signal *s)
{
	WRITE_ONCE(deferred_pending, 0);   /* no report after the directory has gone, */
	options_reset();                   /* nor at exit */
	unlink(s->path);
	rmdir(s->dir);
}

#endif
