/* SPDX-License-Identifier: MIT */
/*
 * fuzz_options - the USLAB_* option parser (platform/options.c) against a
 * slow obvious model of docs/options.md's rules.
 *
 * The input's first byte picks an option of the table (or none: the rest is
 * a whole environment entry, name and all); the rest is the value. The
 * entry goes through options_parse_entry, as options_init passes each
 * USLAB_ variable, and the value that results must be the model's: a value
 * the model accepts is taken, anything else leaves the default. Then
 * options_set (uslab_ctl) gets a name and a number from the input, and
 * must accept exactly the live options with a value in range.
 *
 * The model: BOOL is one of 0 1 no yes off on false true, the words in any
 * case; INT is decimal digits, nothing else, at most INT_MAX; SIZE is digits
 * with at most one k/m/g (either case) after them, and no more than
 * LONG_MAX bytes; SIGNAL is USR1 USR2 HUP PROF WINCH URG, with or without
 * SIG, or the number of one of them or of a real-time signal (SIGRTMIN ..
 * SIGRTMAX); STR is any non-empty string.
 */
#define _GNU_SOURCE
#include "fuzz.h"
#include "options.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <strings.h>
#include <unistd.h>

enum type { BOOL, INT, SIZE, STR, SIGNAL };

static const struct {
	const char *env;
	enum type type;
	long dflt;
} table[OPT_COUNT] = {
#define X(id, env, type, dflt, doc) [OPT_##id] = { env, type, dflt },
	USLAB_OPTIONS(X)
#undef X
};

/* ---- the model ------------------------------------------------------------------------------ */

/* Decimal digits only, and the value they spell if it fits below limit. */
static bool model_digits(const char *s, size_t len, unsigned long long limit,
			 unsigned long long *out)
{
	unsigned long long v = 0;

	if (len == 0)
		return false;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		if (v > (limit - (unsigned)(s[i] - '0')) / 10)
			return false;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	*out = v;
	return true;
}

static bool model_value(enum type type, const char *s, long *out)
{
	static const char *const yes[] = { "1", "yes", "on", "true" };
	static const char *const no[] = { "0", "no", "off", "false" };
	static const struct { const char *name; int sig; } sigs[] = {
		{ "USR1", SIGUSR1 }, { "USR2", SIGUSR2 }, { "HUP", SIGHUP },
		{ "PROF", SIGPROF }, { "WINCH", SIGWINCH }, { "URG", SIGURG },
	};
	size_t len = strlen(s);
	unsigned long long v;

	switch (type) {
	case BOOL:
		for (int i = 0; i < 4; i++) {
			if (!strcasecmp(s, yes[i]))
				return *out = 1, true;
			if (!strcasecmp(s, no[i]))
				return *out = 0, true;
		}
		return false;
	case INT:
		if (!model_digits(s, len, INT_MAX, &v))
			return false;
		return *out = (long)v, true;
	case SIZE: {
		unsigned long long mul = 1;
		char last = len ? s[len - 1] : 0;
		if (last == 'k' || last == 'K')
			mul = 1ull << 10;
		else if (last == 'm' || last == 'M')
			mul = 1ull << 20;
		else if (last == 'g' || last == 'G')
			mul = 1ull << 30;
		if (mul > 1)
			len--;
		if (!model_digits(s, len, LONG_MAX / mul, &v))
			return false;
		return *out = (long)(v * mul), true;
	}
	case SIGNAL: {
		const char *name = strncmp(s, "SIG", 3) == 0 ? s + 3 : s;
		for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
			if (!strcmp(name, sigs[i].name))
				return *out = sigs[i].sig, true;
		if (!model_digits(name, strlen(name), NSIG - 1, &v))
			return false;
		for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
			if (v == (unsigned long long)sigs[i].sig)
				return *out = (long)v, true;
		if (v < (unsigned long long)SIGRTMIN || v > (unsigned long long)SIGRTMAX)
			return false;
		return *out = (long)v, true;
	}
	case STR:
		return *out = 0, len > 0;
	}
	return false;
}

/* ---- the run -------------------------------------------------------------------------------- */

static bool live_option(int i)
{
	return i == OPT_STATS || i == OPT_DECAY_MS || i == OPT_DIRTY_MAX ||
	       i == OPT_DIRTY_PERCENT || i == OPT_RESERVE_SEGMENTS || i == OPT_HUGE_PAGES;
}

/* stderr to /dev/null (on) and back (off) */
static void quiet(bool on)
{
	static int saved = -1, null_fd = -1;

	if (null_fd < 0) {
		null_fd = open("/dev/null", O_WRONLY);
		saved = dup(2);
		FUZZ_CHECK(null_fd >= 0 && saved >= 0, "cannot open /dev/null");
	}
	dup2(on ? null_fd : saved, 2);
}

static void check_entry(const uint8_t *data, size_t size)
{
	static char entry[4096];
	int which = data[0] % (OPT_COUNT + 1);   /* OPT_COUNT: the input is the whole entry */
	size_t len = 0;

	if (which < OPT_COUNT)
		len = (size_t)snprintf(entry, sizeof(entry), "%s=", table[which].env);
	for (size_t i = 1; i < size && len + 1 < sizeof(entry); i++)
		if (data[i])   /* an environment entry has no NUL inside */
			entry[len++] = (char)data[i];
	entry[len] = 0;

	options_reset();
	quiet(true);   /* a bad value's warning line, on every other input */
	options_parse_entry(entry);
	quiet(false);

	/* which option the entry names, by the model: "USLAB_NAME=" exactly */
	const char *eq = strchr(entry, '=');
	for (int i = 0; i < OPT_COUNT; i++) {
		size_t n = strlen(table[i].env);
		long want = table[i].dflt, got = option_values[i];
		bool named = eq && (size_t)(eq - entry) == n && !strncmp(entry, table[i].env, n);
		long v;

		if (named && model_value(table[i].type, eq + 1, &v))
			want = v;
		if (table[i].type == STR) {
			const char *s = option_str(i);
			bool set = named && eq[1];
			FUZZ_CHECK(set ? s == eq + 1 : s == NULL,
				   "'%s': %s is %s, want %s", entry, table[i].env, s ? s : "(unset)",
				   set ? eq + 1 : "(unset)");
			continue;
		}
		FUZZ_CHECK(got == want, "'%s': %s = %ld, the model says %ld", entry, table[i].env,
			   got, want);
	}
}

static void check_ctl(const uint8_t *data, size_t size)
{
	int which = data[0] % OPT_COUNT;
	long v = 0, old = -1;

	for (size_t i = 1; i < size && i <= 8; i++)
		v = (long)((unsigned long)v << 8 | data[i]);
	if (size > 9 && (data[9] & 1))
		v = -(v & LONG_MAX);
	options_reset();
	int rc = options_set(table[which].env + 6, &old, &v);
	bool ok = live_option(which) &&
		  (table[which].type == BOOL ? (v == 0 || v == 1) :
		   table[which].type == INT ? (v >= 0 && v <= INT_MAX) : v >= 0);
	FUZZ_CHECK(rc == (ok ? 0 : -EINVAL), "uslab_ctl(\"%s\", %ld) returned %d",
		   table[which].env + 6, v, rc);
	if (ok) {
		FUZZ_CHECK(old == table[which].dflt, "uslab_ctl(\"%s\"): old value %ld, default %ld",
			   table[which].env + 6, old, table[which].dflt);
		FUZZ_CHECK(option_values[which] == v, "uslab_ctl(\"%s\", %ld) left %ld",
			   table[which].env + 6, v, option_values[which]);
	} else {
		FUZZ_CHECK(option_values[which] == table[which].dflt,
			   "a refused uslab_ctl(\"%s\", %ld) changed the value to %ld",
			   table[which].env + 6, v, option_values[which]);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_name = "fuzz_options";
	if (size == 0)
		return 0;
	check_entry(data, size);
	check_ctl(data, size);
	options_reset();
	return 0;
}
