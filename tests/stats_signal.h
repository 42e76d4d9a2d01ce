/* SPDX-License-Identifier: MIT */
/*
 * stats_signal.h - a test's own statistics signal: USLAB_STATS_SIGNAL=USR2
 * and USLAB_STATS_FILE in a fresh directory, set through the option parser,
 * and the handler installed (stats_init), as a process started with both
 * variables would have them.
 *
 *   struct stats_signal sig;   (in main or static: the options point into it)
 *   stats_signal_setup(&sig, "uslab-my-test");   raise(SIGUSR2) writes sig.path
 *   stats_signal_teardown(&sig);                 no report after it, nor at exit
 */
#ifndef USLAB_TEST_STATS_SIGNAL_H
#define USLAB_TEST_STATS_SIGNAL_H

#include "test.h"
#include "api.h"       /* stats_init */
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

static inline void stats_signal_teardown(struct stats_signal *s)
{
	WRITE_ONCE(deferred_pending, 0);   /* no report after the directory has gone, */
	options_reset();                   /* nor at exit */
	unlink(s->path);
	rmdir(s->dir);
}

#endif
