/* SPDX-License-Identifier: MIT */
/*
 * options.c - read the USLAB_* environment once, without allocating.
 *
 * Runs from the library constructor and from the first slow path (whichever
 * comes first). A bad value, or a USLAB_ name that is not an option, gets one
 * warning line on stderr and the default is kept.
 *
 * Once per process tree: the environment is inherited, so every child of a
 * program started with a bad value would repeat its warnings (a shell script
 * running 30 commands prints 30). The first process that warns leaves a
 * marker in its environment, USLAB_WARNED=<hash>,<hash>,... with one hash
 * per entry it warned about (options_mark_warned, from the constructor); a
 * process stays quiet about the entries its marker lists, warns about any
 * other, and adds those to the marker its own children inherit.
 */
#define _GNU_SOURCE
#include "platform.h"
#include "options.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

extern char **environ;

enum opt_type { BOOL, INT, SIZE, STR, SIGNAL };

static const struct {
	const char *env;
	enum opt_type type;
	long dflt;
} table[OPT_COUNT] = {
#define X(id, env, type, dflt, doc) [OPT_##id] = { env, type, dflt },
	USLAB_OPTIONS(X)
#undef X
};

long option_values[OPT_COUNT] = {
#define X(id, env, type, dflt, doc) [OPT_##id] = dflt,
	USLAB_OPTIONS(X)
#undef X
};
const char *option_strings[OPT_COUNT];
/* where each value came from: the default, the environment, or uslab_ctl */
enum { FROM_DEFAULT, FROM_ENV, FROM_CTL };
static const char *const source_name[] = { "default", "environment", "uslab_ctl" };
static uint8_t option_source[OPT_COUNT];

/* What each type of value must look like, for the warning. */
static const char *const expected[] = {
	[BOOL] = "0 or 1 (also no/yes, off/on, false/true, in any case)",
	[INT] = "a whole number from 0 to 2147483647",
	[SIZE] = "a byte count, optionally with k, m or g",
	[STR] = "a non-empty string",
	[SIGNAL] = "USR1, USR2, HUP, PROF, WINCH, URG, or the number of one or of a real-time signal",
};

#define WARNED_ENV "USLAB_WARNED="
#define WARNED_MAX 16      /* entries a process adds to the marker */

/* The marker: the hashes of the entries warned about up the tree, 16 hex
 * digits each, comma-separated. */
static const char *warn_marker;
static uint64_t warned[WARNED_MAX];
static int nwarned;

static uint64_t entry_hash(const char *entry)
{
	uint64_t h = 14695981039346656037ull;   /* FNV-1a */

	for (const char *c = entry; *c; c++)
		h = (h ^ (unsigned char)*c) * 1099511628211ull;
	return h;
}

static bool marker_has(uint64_t h)
{
	char hex[17];
	size_t n;

	snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)h);
	for (const char *m = warn_marker; m && *m; m += n + (m[n] == ',')) {
		n = strcspn(m, ",");
		if (n == 16 && strncmp(m, hex, 16) == 0)
			return true;
	}
	return false;
}

static void warn(const char *what, const char *entry, const char *why)
{
	char buf[384];
	uint64_t h = entry_hash(entry);

	if (marker_has(h))   /* a parent process said it */
		return;
	if (nwarned < WARNED_MAX)
		warned[nwarned++] = h;
	int n = snprintf(buf, sizeof(buf), "uslab: warning: %s '%s' ignored%s\n", what, entry, why);

	if (n > 0 && write(2, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1) < 0)
		return;
}

void options_warn_ignored(const char *entry, const char *why)
{
	warn("option", entry, why);
}

static bool parse_long(const char *s, long *out, bool suffixes)
{
	char *end;
	long v;

	if (*s < '0' || *s > '9')   /* no sign, no space, at least one digit */
		return false;
	int saved = errno;   /* the caller's errno survives the first malloc */
	errno = 0;
	v = strtol(s, &end, 10);
	bool range = errno == ERANGE;
	errno = saved;
	if (range || end == s)
		return false;
	if (suffixes && *end) {
		long mul = (*end == 'k' || *end == 'K') ? 1l << 10 :
			   (*end == 'm' || *end == 'M') ? 1l << 20 :
			   (*end == 'g' || *end == 'G') ? 1l << 30 : 0;
		if (!mul || end[1] || v > __LONG_MAX__ / mul)
			return false;
		v *= mul;
		end++;
	}
	if (*end)
		return false;
	*out = v;
	return true;
}

/*
 * Only signals a program can give up to the report: those that by default
 * end or ignore the process and mean nothing to the kernel's fault
 * handling, by name or number, and the real-time ones by number. A fault
 * signal (SEGV, BUS, ...) taken over would turn a crash into a report and
 * a retried fault, forever; KILL and STOP cannot be caught at all.
 */
static bool parse_signal(const char *s, long *out)
{
	static const struct { const char *name; int sig; } sigs[] = {
		{ "USR1", SIGUSR1 }, { "USR2", SIGUSR2 }, { "HUP", SIGHUP },
		{ "PROF", SIGPROF }, { "WINCH", SIGWINCH }, { "URG", SIGURG },
	};
	bool named = false;
	long n;

	if (strncmp(s, "SIG", 3) == 0)
		s += 3;
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		if (strcmp(s, sigs[i].name) == 0) {
			*out = sigs[i].sig;
			return true;
		}
	}
	if (!parse_long(s, &n, false))
		return false;
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		named |= n == sigs[i].sig;
	if (!named && (n < SIGRTMIN || n > SIGRTMAX))
		return false;
	*out = n;
	return true;
}

static bool parse_value(enum opt_type type, const char *s, long *out)
{
	switch (type) {
	case BOOL:
		if (!strcmp(s, "1") || !strcasecmp(s, "yes") || !strcasecmp(s, "on") ||
		    !strcasecmp(s, "true"))
			*out = 1;
		else if (!strcmp(s, "0") || !strcasecmp(s, "no") || !strcasecmp(s, "off") ||
			 !strcasecmp(s, "false"))
			*out = 0;
		else
			return false;
		return true;
	case INT:   /* read as unsigned and int by the layers: no more than INT_MAX */
		return parse_long(s, out, false) && *out <= INT_MAX;
	case SIZE:
		return parse_long(s, out, true);
	case SIGNAL:
		return parse_signal(s, out);
	case STR:
		return *s != 0;
	}
	return false;
}

/* Names uslab's own tools and tests set for themselves, not for the library. */
static bool tool_variable(const char *entry)
{
	static const char *const prefixes[] = { "USLAB_LIB=", "USLAB_TEST_", "USLAB_STRESS_",
						"USLAB_BENCH_", WARNED_ENV };

	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
		if (strncmp(entry, prefixes[i], strlen(prefixes[i])) == 0)
			return true;
	return false;
}

/* One environment entry "USLAB_NAME=value"; exposed for the unit test. */
void options_parse_entry(const char *entry)
{
	const char *eq = strchr(entry, '=');
	size_t len = eq ? (size_t)(eq - entry) : strlen(entry);

	if (tool_variable(entry))
		return;
	for (int i = 0; i < OPT_COUNT; i++) {
		if (strlen(table[i].env) != len || strncmp(table[i].env, entry, len) != 0)
			continue;
		long v = 0;
		if (!eq || !parse_value(table[i].type, eq + 1, &v)) {
			char why[160];

			if (table[i].type == STR)
				snprintf(why, sizeof(why), ": expected %s", expected[STR]);
			else
				snprintf(why, sizeof(why), ": expected %s; using %ld", expected[table[i].type],
					 option_values[i]);
			warn("bad value in", entry, why);
			return;
		}
		if (table[i].type == STR)
			option_strings[i] = eq + 1;
		option_values[i] = v;
		option_source[i] = FROM_ENV;
		return;
	}
	warn("unknown option", entry, " (docs/options.md lists them)");
}

static int options_done;   /* the environment has been read (options_init) */

/* Tests: forget what was read; the next options_init reads again. */
void options_forget(void)
{
	options_reset();
	smp_store_release(&options_done, 0);
}

void options_reset(void)
{
	for (int i = 0; i < OPT_COUNT; i++) {
		option_values[i] = table[i].dflt;
		option_strings[i] = NULL;
		option_source[i] = FROM_DEFAULT;
	}
}

/*
 * Set USLAB_WARNED in environ itself, not through putenv: a program may
 * define its own putenv (bash does, over its shell variables, and drops
 * what it is given before they exist). An existing entry is replaced in
 * place; else environ becomes a copy with the marker added (mapped, never
 * freed: environ's old array may be on the stack or the program's).
 */
void options_mark_warned(void)
{
	static char entry[sizeof(WARNED_ENV) + 2 * WARNED_MAX * 17];
	size_t n = 0, room = sizeof(entry), count = 0;
	char **e;

	if (!nwarned)
		return;
	n += (size_t)snprintf(entry, room, WARNED_ENV "%.*s", WARNED_MAX * 17 - 1,
			      warn_marker ? warn_marker : "");
	for (int i = 0; i < nwarned && n + 18 < room; i++)
		n += (size_t)snprintf(entry + n, room - n, "%s%016llx",
				      n > strlen(WARNED_ENV) ? "," : "",
				      (unsigned long long)warned[i]);
	for (e = environ; e && *e; e++, count++) {
		if (strncmp(*e, WARNED_ENV, strlen(WARNED_ENV)) == 0) {
			*e = entry;
			return;
		}
	}
	size_t size = round_up((count + 2) * sizeof(char *), os_page_size());
	char **copy = os_map_aligned(size, os_page_size());

	if (!copy)
		return;
	if (count)
		memcpy(copy, environ, count * sizeof(char *));
	copy[count] = entry;   /* the mapping reads as zero: copy[count + 1] ends it */
	environ = copy;
}

void options_init(void)
{
	int *done = &options_done;

	/* acquire: pairs with the release below, so the values are read whole */
	if (smp_load_acquire(done))
		return;
	static mutex_t lock = MUTEX_INIT;
	lock_ranked(&lock, RANK_OPTIONS);
	if (!*done) {
		for (char **e = environ; e && *e; e++)   /* first: it silences warnings */
			if (strncmp(*e, WARNED_ENV, strlen(WARNED_ENV)) == 0)
				warn_marker = *e + strlen(WARNED_ENV);
		for (char **e = environ; e && *e; e++)
			if (strncmp(*e, "USLAB_", 6) == 0)
				options_parse_entry(*e);
		smp_store_release(done, 1);   /* release: after every value (above) */
	}
	unlock_ranked(&lock, RANK_OPTIONS);
}

void options_report(void (*out)(const char *line, void *arg), void *arg)
{
	char line[256];

	for (int i = 0; i < OPT_COUNT; i++) {
		const char *from = source_name[option_source[i]];

		if (table[i].type == STR)
			snprintf(line, sizeof(line), "%s=%s (%s)", table[i].env,
				 option_strings[i] ? option_strings[i] : "", from);
		else
			snprintf(line, sizeof(line), "%s=%ld (%s)", table[i].env, option_values[i], from);
		out(line, arg);
	}
}

/* The options whose readers look again every time (decay, budgets, huge
 * pages, the exit report); the others are read once, at start-up or when
 * a cache is set up. */
static const enum option_id live_options[] = {
	OPT_STATS, OPT_DECAY_MS, OPT_DIRTY_MAX, OPT_DIRTY_PERCENT, OPT_RESERVE_SEGMENTS,
	OPT_HUGE_PAGES,
};

int options_set(const char *name, long *old, const long *new_value)
{
	options_init();
	for (size_t k = 0; k < sizeof(live_options) / sizeof(live_options[0]); k++) {
		enum option_id i = live_options[k];

		if (!name || strcasecmp(name, table[i].env + 6) != 0)   /* past "USLAB_" */
			continue;
		if (new_value) {
			long v = *new_value;
			bool ok = table[i].type == BOOL ? (v == 0 || v == 1) :
				  table[i].type == INT ? (v >= 0 && v <= INT_MAX) : v >= 0;
			if (!ok)
				return -EINVAL;
		}
		if (old)
			*old = option(i);
		if (new_value) {
			WRITE_ONCE(option_values[i], *new_value);
			option_source[i] = FROM_CTL;
		}
		return 0;
	}
	return -EINVAL;
}
