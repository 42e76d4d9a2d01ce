/* SPDX-License-Identifier: MIT */
/*
 * prof.c - USLAB_PROF=1: the heap profiler. Which call stacks hold the
 * memory, and which allocated the most, from a sample of the blocks, cheap
 * enough to leave on in production (docs/profiling.md).
 *
 * Sampling. The sample points are a Poisson process over the bytes each
 * thread allocates, one per USLAB_PROF_SAMPLE on average: a block of n
 * bytes is sampled with probability 1 - exp(-n / mean), whatever the sizes
 * around it, and a sampled block stands for 1 / that many blocks - the
 * "heap_v2" convention that google-pprof and jeprof undo when they read a
 * profile. Each thread counts down the bytes to its next sample point
 * (prof_sample_due: one compare and one subtraction a block), the interval
 * drawn afresh, exponential with the mean, from a per-thread generator
 * after each sample.
 *
 * Reaching the allocations. While the profiler is on, malloc is diverted to
 * it (kmalloc_divert: the inline path's limits are 0, so every request goes
 * to prof_malloc_call), which counts the bytes asked for and serves every
 * block but the sampled ones as without the profiler (kmalloc_direct).
 * calloc's large blocks, memalign's over-aligned or large ones and
 * realloc's in-place growth, which do not come through malloc, are counted
 * by api/malloc.c through prof_sample_due. free is not diverted: its inline
 * path stays as it is for every block that is not sampled, and the next
 * malloc of a class takes back the block freed last, as without the
 * profiler. With USLAB_PROF_SAMPLE=1 every block is sampled (the interval
 * is 0).
 *
 * A sampled small block (and, with USLAB_PROF_SAMPLE=1, every one) sits
 * inside a kmalloc block, behind a header:
 *
 *   base                         user = base + front
 *   | (align padding) | header 32 B |  the program's n bytes ... |
 *                       next, stack, size, front
 *
 * front is 32 bytes, or the alignment asked for when that is more. user is
 * never where a kmalloc block starts (the block is larger than front), so
 * kfree's inline path refuses it and kfree_direct, finding no block there,
 * asks prof_free_stray (kdiv.stray) before it would call the pointer
 * invalid. The base comes from kmalloc_aligned, never from the start-up
 * arena, whose frees do not ask. A sampled large or huge block is the
 * program's block as it is (a header would push a 2 MiB block into a
 * mapping of its own, and 4 MiB into 4 MiB + 4 KiB), its record apart
 * (struct prof_far): their frees are slow paths already, and free_nonsmall
 * tells prof_far_gone of each (kmalloc_divert_gone).
 *
 * Which pointers are sampled: a chained hash table whose chains run
 * through the headers and the records apart. A pointer not in it is no block of the profiler's,
 * and nothing is read at it. realloc and malloc_usable_size ask about every
 * pointer but a small block's start (which no sampled block is) while the
 * profiler is on: prof_owns first looks, without the
 * lock, whether the pointer's bucket is empty (the table is kept at most
 * 1/8 full, so it nearly always is), and takes the lock only if not. A
 * table that grows is replaced, the old one kept mapped for readers that
 * still look at it (its buckets only ever stay non-empty: a false "maybe").
 *
 * Stacks: unwind_stack (platform/unwind.h: on x86-64 the unwind tables'
 * rule of each return address, cached; elsewhere glibc's backtrace()),
 * trimmed to start at the malloc-family call (the caller's return address,
 * which the entry point passes down) and past this library's own frames
 * when it is a shared object (operator new calls uslab_malloc). The
 * unwinder is set up at start-up (unwind_init: on x86-64 its cache, else
 * backtrace's first call, which loads libgcc's unwinder and allocates);
 * on x86-64 a thread's first unwind asks for its stack's bounds, and the
 * first that falls back to backtrace() loads libgcc's: both may allocate
 * there and then. While a thread samples (prof_inside), the allocations
 * of the unwinder, or of anything else inside, are never sampled: the
 * profiler does not recurse into itself. Each distinct stack is a record
 * with four counters (sampled blocks and bytes, live and ever allocated),
 * in a second table, from mappings of their own, never freed.
 *
 * One lock, prof_lock, guards both tables and the counters; it is a leaf,
 * held across nothing but os_map and the writing of a profile. It takes
 * the debug mode's rank: the two never run in one process (the debug mode
 * wins, with a warning).
 *
 * Profiles: gperftools' heap profile, in text (docs/profiling.md) - written
 * to a temporary name and renamed, with integer and string conversions
 * only and no allocation, so the signal's handler can write it itself when
 * the lock is free; when it is taken (perhaps by the thread the signal
 * interrupted), the handler leaves the dump to the holder, which writes it
 * before it lets go (prof_unlock). At exit, also a summary on stderr: the
 * sites that allocated the most, and the ones holding the most still live
 * (the leak report), estimated from the sample and named with dladdr.
 */
#define _GNU_SOURCE
#include "api.h"
#include "debug.h"
#include "options.h"
#include "unwind.h"

#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PROF_DEPTH   64         /* frames kept of a stack */
#define PROF_FRONT   32         /* the header before a sampled block's bytes */
#define PROF_PATH    1024       /* a profile's path, expanded */
#define CHUNK_BYTES  (64u << 10)   /* stack records are cut from mappings this big */

bool prof_on;

/* A chain link: the first field of every record in a table. */
struct link {
	struct link *next;
};

/* One distinct call stack and its sampled blocks. */
struct prof_stack {
	struct link chain;          /* in stacks */
	struct prof_stack *older;   /* every stack, newest first (newest) */
	uint64_t hash;
	uint64_t live_blocks, live_bytes;     /* sampled, not freed */
	uint64_t alloc_blocks, alloc_bytes;   /* sampled, ever */
	uint32_t depth;
	const void *pc[];           /* return addresses, the call site first */
};

/* Before a sampled block's first byte. */
struct prof_block {
	struct link chain;          /* in blocks */
	struct prof_stack *stack;
	size_t size;                /* what the program asked for */
	uint32_t front;             /* user - base */
	uint32_t unused;
};
_Static_assert(sizeof(struct prof_block) == PROF_FRONT, "the header is the front");

/* A large or huge block sampled as it is (no header: its size stays the
 * one asked for), its record apart, in the profiler's own memory; front 0
 * says so. Spare records wait on far_spare, linked by chain. */
struct prof_far {
	struct prof_block b;
	void *user;                 /* the block's start */
};

/* A chained hash table in a mapping of its own. */
struct prof_table {
	size_t mask;                /* buckets - 1 */
	size_t count;
	size_t bytes;               /* of the mapping */
	struct link *heads[];
};

static mutex_t prof_lock = MUTEX_INIT;
FORK_LOCK(prof_lock, RANK_DEBUG);

static struct prof_table *blocks;   /* published with release: prof_owns reads it unlocked */
static struct prof_table *stacks;
static struct prof_stack *newest;
static char *chunk_next, *chunk_end;
static struct link *far_spare;
static uint64_t prof_mean;          /* USLAB_PROF_SAMPLE, at least 1 */
static uint64_t prof_samples;       /* blocks sampled, ever */
static unsigned prof_dumps;         /* profiles written: %n */
static int prof_pending;            /* a signal asked for a profile */
static uintptr_t self_lo, self_hi;  /* this library's code, if a shared object */

/*
 * The calling thread's sample points: prof_left, the bytes it may still
 * allocate before the next one (prof_sample_due); prof_rng 0: no interval
 * drawn yet.
 */
static __thread uint64_t prof_left;
static __thread uint64_t prof_rng;
static __thread bool prof_inside;             /* sampling: nothing inside is sampled */
/* The sampled block prof_owns found last, and its record: realloc and
 * malloc_usable_size ask prof_owns first, then about the same block, which
 * their caller owns, so the record stays as it is meanwhile. */
static __thread const void *prof_found_user;
static __thread struct prof_block *prof_found;

/* ---- numbers --------------------------------------------------------------------- */

/* ln x for x > 0, to about 1e-12 (the library does not link libm): x as
 * m * 2^e with m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh((m - 1) / (m + 1)). */
static double prof_ln(double x)
{
	uint64_t bits;
	int e;

	memcpy(&bits, &x, sizeof(bits));
	e = (int)(bits >> 52 & 0x7ff) - 1023;
	bits = (bits & ~(0x7ffull << 52)) | (1023ull << 52);   /* m in [1, 2) */
	memcpy(&x, &bits, sizeof(x));
	if (x > 1.4142135623730951) {
		x *= 0.5;
		e++;
	}
	double t = (x - 1) / (x + 1), t2 = t * t;
	double s = 1.0 / 13;

	for (int k = 11; k >= 1; k -= 2)
		s = s * t2 + 1.0 / k;
	return 2 * t * s + e * 0.6931471805599453;
}

/* 1 - exp(-x) for x >= 0: the chance that a block x sample intervals long
 * is sampled. By the series near 0 (no cancellation), else exp(-x) as
 * 2^-k exp(-r), r in [0, ln 2). */
static double prof_hit_chance(double x)
{
	if (x < 1e-3)
		return x * (1 - x / 2 * (1 - x / 3 * (1 - x / 4)));
	if (x > 40)
		return 1;
	int k = (int)(x / 0.6931471805599453);
	double r = x - k * 0.6931471805599453, term = 1, sum = 1;

	for (int i = 1; i <= 14; i++) {
		term *= -r / i;
		sum += term;
	}
	while (k--)
		sum *= 0.5;
	return 1 - sum;
}

/* How many blocks (and bytes) count sampled blocks of bytes in all stand
 * for: each was sampled with chance prof_hit_chance(its size / mean), taken
 * at their mean size, as pprof does. */
static double prof_scale(uint64_t count, uint64_t bytes)
{
	if (!count || prof_mean == 1)
		return count ? 1 : 0;
	return 1 / prof_hit_chance((double)bytes / (double)count / (double)prof_mean);
}

static uint64_t addr_hash(uintptr_t a)
{
	uint64_t h = a;   /* murmur3's finaliser */

	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	return h;
}

/* The threads' streams of random numbers start from prof_seed (the
 * kernel's, drawn at start-up) and the count of streams begun before:
 * distinct for every thread, with no system call per thread. */
static uint64_t prof_seed;
static atomic_long_t prof_streams;

static noinline uint64_t prof_stream_new(void)
{
	uint64_t n = (uint64_t)atomic_long_fetch_add(1, &prof_streams);

	return addr_hash(prof_seed + n * 0x9e3779b97f4a7c15ull) | 1;
}

/* The next interval: exponential with mean prof_mean, at least 1; 0 with
 * prof_mean 1, which samples every block. */
static uint64_t prof_draw(void)
{
	uint64_t x = prof_rng;   /* xorshift64, never 0 */

	if (prof_mean == 1)
		return 0;
	if (unlikely(!x))
		x = prof_stream_new();

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	prof_rng = x;
	double u = (double)((x >> 11) + 1) * 0x1p-53;   /* (0, 1] */
	double d = -prof_ln(u) * (double)prof_mean;

	return d < 0x1p62 ? (uint64_t)d + 1 : 1ull << 62;
}

/* ---- the tables (prof_lock held) -------------------------------------------------- */

static struct prof_table *table_new(size_t buckets)
{
	size_t bytes = round_up(sizeof(struct prof_table) + buckets * sizeof(struct link *),
				os_page_size());
	struct prof_table *t = os_map_aligned(bytes, os_page_size());

	if (t) {
		t->mask = buckets - 1;
		t->bytes = bytes;
	}
	return t;
}

/* The program's pointer to a sampled block: after its header, or the one
 * its record apart holds. */
static void *block_user(const struct prof_block *b)
{
	return b->front ? (char *)(b + 1) : container_of(b, struct prof_far, b)->user;
}

static uint64_t block_key(const struct link *l)
{
	return addr_hash((uintptr_t)block_user(container_of(l, struct prof_block, chain)));
}

static uint64_t stack_key(const struct link *l)
{
	return container_of(l, struct prof_stack, chain)->hash;
}

/* t, *tp grown to buckets, every record moved over by key; the old table
 * is returned, unchanged but for its records' links (NULL: no memory). */
static struct prof_table *table_grow(struct prof_table **tp, size_t buckets,
				     uint64_t (*key)(const struct link *))
{
	struct prof_table *old = *tp, *t = table_new(buckets);

	if (!t)
		return NULL;
	for (size_t i = 0; i <= old->mask; i++) {
		for (struct link *l = old->heads[i], *next; l; l = next) {
			size_t k = key(l) & t->mask;

			next = l->next;
			l->next = t->heads[k];
			t->heads[k] = l;
		}
	}
	t->count = old->count;
	/* release: the buckets above before the pointer (prof_owns' acquire) */
	smp_store_release(tp, t);
	return old;
}

static void table_insert(struct prof_table *t, struct link *l, uint64_t key)
{
	struct link **head = &t->heads[key & t->mask];

	l->next = *head;
	WRITE_ONCE(*head, l);   /* read unlocked by prof_owns: only NULL or not */
	t->count++;
}

/* Room for one more sampled block: the table at most 1/8 full, so that
 * prof_owns' unlocked look finds an empty bucket for nearly every pointer
 * that is not one. The old table stays mapped (read unlocked). */
static bool blocks_reserve(void)
{
	if ((blocks->count + 1) * 8 <= blocks->mask + 1)
		return true;
	return table_grow(&blocks, (blocks->mask + 1) * 4, block_key) != NULL;
}

static struct prof_block *block_find(const void *user, struct link ***where)
{
	struct link **l = &blocks->heads[addr_hash((uintptr_t)user) & blocks->mask];

	for (; *l; l = &(*l)->next) {
		if (block_user(container_of(*l, struct prof_block, chain)) == user) {
			*where = l;
			return container_of(*l, struct prof_block, chain);
		}
	}
	return NULL;
}

static void *chunk_take(size_t bytes)
{
	bytes = round_up(bytes, sizeof(void *));
	if ((size_t)(chunk_end - chunk_next) < bytes) {
		char *c = os_map_aligned(CHUNK_BYTES, os_page_size());

		if (!c)
			return NULL;
		chunk_next = c;
		chunk_end = c + CHUNK_BYTES;
	}
	chunk_next += bytes;
	return chunk_next - bytes;
}

static uint64_t stack_hash(const void *const *pc, unsigned depth)
{
	uint64_t h = depth;

	for (unsigned i = 0; i < depth; i++)
		h = addr_hash(h ^ (uintptr_t)pc[i]) + i;
	return h;
}

/* The record of the stack pc[0..depth), made if new; NULL: no memory. */
static struct prof_stack *stack_get(const void *const *pc, unsigned depth)
{
	uint64_t h = stack_hash(pc, depth);
	struct prof_stack *s;

	for (struct link *l = stacks->heads[h & stacks->mask]; l; l = l->next) {
		s = container_of(l, struct prof_stack, chain);
		if (s->hash == h && s->depth == depth && !memcmp(s->pc, pc, depth * sizeof(*pc)))
			return s;
	}
	if (stacks->count >= stacks->mask + 1) {
		struct prof_table *old = table_grow(&stacks, (stacks->mask + 1) * 2, stack_key);

		if (old)   /* read only under the lock: unmapped at once */
			os_unmap(old, old->bytes);
	}
	s = chunk_take(sizeof(*s) + depth * sizeof(*pc));
	if (!s)
		return NULL;
	s->hash = h;
	s->depth = depth;
	memcpy(s->pc, pc, depth * sizeof(*pc));
	s->older = newest;
	newest = s;
	table_insert(stacks, &s->chain, h);
	return s;
}

/* ---- profiles ----------------------------------------------------------------------- */

/* Formatted output to a file descriptor, through a buffer on the stack. */
struct prof_out {
	int fd;
	bool failed;
	size_t len;
	char buf[2048];
};

static void out_flush(struct prof_out *o)
{
	for (size_t done = 0; done < o->len && !o->failed;) {
		ssize_t n = write(o->fd, o->buf + done, o->len - done);

		if (n > 0)
			done += (size_t)n;
		else if (n == 0 || errno != EINTR)
			o->failed = true;
	}
	o->len = 0;
}

__attribute__((format(printf, 2, 3)))
static void out_printf(struct prof_out *o, const char *fmt, ...)
{
	for (int tries = 0; tries < 2; tries++) {
		size_t room = sizeof(o->buf) - o->len;
		va_list ap;

		va_start(ap, fmt);
		int n = vsnprintf(o->buf + o->len, room, fmt, ap);
		va_end(ap);
		if (n >= 0 && (size_t)n < room) {
			o->len += (size_t)n;
			return;
		}
		out_flush(o);
	}
	o->failed = true;   /* one line longer than the buffer: not written here */
}

/* The heap profile, gperftools' text format (docs/profiling.md): the
 * totals, a line per stack, the process's mappings. prof_lock held. */
static void write_profile(struct prof_out *o)
{
	uint64_t t[4] = { 0 };

	for (struct prof_stack *s = newest; s; s = s->older) {
		t[0] += s->live_blocks, t[1] += s->live_bytes;
		t[2] += s->alloc_blocks, t[3] += s->alloc_bytes;
	}
	/* every block (USLAB_PROF_SAMPLE=1): "heapprofile", counts as they are */
	char type[32] = "heapprofile";
	if (prof_mean > 1)
		snprintf(type, sizeof(type), "heap_v2/%llu", (unsigned long long)prof_mean);
	out_printf(o, "heap profile: %6llu: %8llu [%6llu: %8llu] @ %s\n",
		   (unsigned long long)t[0], (unsigned long long)t[1], (unsigned long long)t[2],
		   (unsigned long long)t[3], type);
	for (struct prof_stack *s = newest; s; s = s->older) {
		out_printf(o, "%6llu: %8llu [%6llu: %8llu] @", (unsigned long long)s->live_blocks,
			   (unsigned long long)s->live_bytes, (unsigned long long)s->alloc_blocks,
			   (unsigned long long)s->alloc_bytes);
		for (unsigned i = 0; i < s->depth; i++)
			out_printf(o, " 0x%lx", (unsigned long)(uintptr_t)s->pc[i]);
		out_printf(o, "\n");
	}
	out_printf(o, "\nMAPPED_LIBRARIES:\n");
	out_flush(o);
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		o->failed = true;
		return;
	}
	for (;;) {
		ssize_t n = read(fd, o->buf, sizeof(o->buf));   /* the buffer is empty */

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		o->len = (size_t)n;
		out_flush(o);
	}
	close(fd);
}

/* pattern with %p (the process id), %n (the dump's number) and %% expanded
 * into out[PROF_PATH]; false if it does not fit. */
static bool expand_path(const char *pattern, unsigned number, char *out)
{
	size_t len = 0;

	for (const char *c = pattern; *c; c++) {
		char num[24];
		const char *add = num;
		size_t n;

		if (c[0] == '%' && c[1] == 'p')
			snprintf(num, sizeof(num), "%d", (int)getpid());
		else if (c[0] == '%' && c[1] == 'n')
			snprintf(num, sizeof(num), "%u", number);
		else if (c[0] == '%' && c[1] == '%')
			snprintf(num, sizeof(num), "%%");
		else
			add = NULL;
		if (add)
			c++;
		n = add ? strlen(add) : 1;
		if (len + n >= PROF_PATH)
			return false;
		memcpy(out + len, add ? add : c, n);
		len += n;
	}
	out[len] = 0;
	return true;
}

static const char *profile_pattern(void)
{
	const char *f = option_str(OPT_PROF_FILE);

	return f ? f : "uslab.%p.heap";
}

/* Write the profile to pattern, expanded into path[PROF_PATH]: to
 * path.tmp, then renamed, so that a reader never sees half of one; a path
 * that is not a regular file (/dev/stderr) is written to as it is.
 * prof_lock held. 0 or -errno. */
static int dump_locked(const char *pattern, char *path)
{
	char tmp[PROF_PATH + 8];
	struct prof_out o = { .fd = -1 };
	struct stat st;

	if (!expand_path(pattern, prof_dumps, path))
		return -ENAMETOOLONG;
	bool direct = stat(path, &st) == 0 && !S_ISREG(st.st_mode);
	snprintf(tmp, sizeof(tmp), "%s%s", path, direct ? "" : ".tmp");
	o.fd = open(tmp, O_WRONLY | O_CREAT | (direct ? O_APPEND : O_TRUNC) | O_CLOEXEC, 0644);
	if (o.fd < 0)
		return -errno;
	prof_dumps++;
	write_profile(&o);
	int err = o.failed ? (errno ? errno : EIO) : 0;
	if (close(o.fd) != 0 && !err)
		err = errno;
	if (!err && !direct && rename(tmp, path) != 0)
		err = errno;
	if (err && !direct)
		unlink(tmp);
	return -err;
}

static void prof_lock_take(void)
{
	lock_ranked(&prof_lock, RANK_DEBUG);
}

/*
 * Let go of prof_lock, after writing the profile a signal asked for while
 * it was held (prof_signal). A signal that comes after the last look finds
 * the lock free, or taken by a thread that will look again. ranked: the
 * lock was taken with lock_ranked; the handler's trylock was not, since
 * the lock order's bookkeeping is plain per-thread counters that the
 * interrupted thread may be in the middle of updating (a debug build
 * aborted so), and a trylock cannot deadlock.
 */
static void prof_unlock_as(bool ranked)
{
	char path[PROF_PATH];

	for (;;) {
		int asked = 1;

		/* acq_rel: pairs with the handler's release of 1 */
		while (READ_ONCE(prof_pending) && try_cmpxchg_acq_rel(&prof_pending, &asked, 0))
			dump_locked(profile_pattern(), path), asked = 1;
		if (ranked)
			unlock_ranked(&prof_lock, RANK_DEBUG);
		else
			mutex_unlock(&prof_lock);
		if (!READ_ONCE(prof_pending) || !mutex_trylock(&prof_lock))
			return;
		if (ranked)
			lock_rank_acquire(RANK_DEBUG);
	}
}

static void prof_unlock(void)
{
	prof_unlock_as(true);
}

static void prof_signal(int sig)
{
	int saved = errno;

	(void)sig;
	smp_store_release(&prof_pending, 1);   /* release: pairs with prof_unlock's acq_rel */
	if (mutex_trylock(&prof_lock))         /* else the holder writes it */
		prof_unlock_as(false);
	errno = saved;
}

USLAB_API int uslab_prof_dump(const char *path)
{
	char out[PROF_PATH];

	if (!READ_ONCE(prof_on))
		return -EINVAL;
	prof_lock_take();
	int r = dump_locked(path ? path : profile_pattern(), out);
	prof_unlock();
	return r;
}

/* ---- sampling ------------------------------------------------------------------------- */

static bool in_self(const void *pc)
{
	return (uintptr_t)pc - self_lo < self_hi - self_lo;
}

/* The calling stack into pc[PROF_DEPTH], from site (the malloc-family
 * call's return address) on, past this library's own frames. The walk's
 * own blocks (backtrace()'s, where it is the unwinder) are the profiler's,
 * not the program's: the count is as it was before it. */
static unsigned prof_backtrace(const void **pc, const void *site)
{
	const void *raw[PROF_DEPTH + 16];
	uint64_t left = prof_left;
	unsigned n = unwind_stack(raw, PROF_DEPTH + 16), k = 0;
	unsigned depth = 0;

	prof_left = left;

	while (k < n && raw[k] != site)
		k++;
	if (k == n) {   /* site not among them (no unwind info): site alone */
		pc[0] = site;
		return 1;
	}
	while (k < n - 1 && in_self(raw[k]))
		k++;
	while (k < n && depth < PROF_DEPTH)
		pc[depth++] = raw[k++];
	return depth;
}

/* prof_sample_due's other cases (and prof_malloc_call's): the thread's
 * first block (no interval drawn yet), a block inside a sample (never
 * sampled, and left uncounted), and the block the sample point falls in
 * (the next interval is drawn). */
static noinline bool prof_due_slow(size_t n)
{
	if (prof_inside)
		return false;
	if (unlikely(!prof_rng)) {
		prof_left = prof_draw();
		if (n < prof_left) {
			prof_left -= n;
			return false;
		}
	}
	prof_left = prof_draw();
	return true;
}

/* n bytes more on the calling thread's count: true when the block is to be
 * sampled (prof_alloc then makes it; the next interval is drawn already).
 * One compare and one subtraction while the interval lasts. */
bool prof_sample_due(size_t n)
{
	uint64_t left = prof_left;

	if (likely(n < left)) {
		prof_left = left - n;
		return false;
	}
	return prof_due_slow(n);
}

/* The header at base + front - PROF_FRONT recorded for stack pc: the block
 * is sampled; false: no memory for the record. */
static bool prof_record(char *base, size_t front, size_t n, const void *const *pc, unsigned depth)
{
	struct prof_block *b = (struct prof_block *)(base + front) - 1;
	bool ok;

	b->size = n;
	b->front = (uint32_t)front;
	prof_lock_take();
	b->stack = stack_get(pc, depth);
	ok = b->stack && blocks_reserve();
	if (ok) {
		table_insert(blocks, &b->chain, block_key(&b->chain));
		b->stack->live_blocks++, b->stack->live_bytes += n;
		b->stack->alloc_blocks++, b->stack->alloc_bytes += n;
		prof_samples++;
	}
	prof_unlock();
	return ok;
}

/* The record apart of large or huge block p of n bytes, sampled at the
 * stack pc; false: no memory for it. */
static bool prof_record_far(void *p, size_t n, const void *const *pc, unsigned depth)
{
	struct prof_far *f;
	bool ok = false;

	prof_lock_take();
	f = far_spare ? container_of(far_spare, struct prof_far, b.chain) : chunk_take(sizeof(*f));
	if (f) {
		if (far_spare)
			far_spare = far_spare->next;
		f->user = p;
		f->b.size = n;
		f->b.front = 0;
		f->b.stack = stack_get(pc, depth);
		ok = f->b.stack && blocks_reserve();
	}
	if (ok) {
		table_insert(blocks, &f->b.chain, block_key(&f->b.chain));
		f->b.stack->live_blocks++, f->b.stack->live_bytes += n;
		f->b.stack->alloc_blocks++, f->b.stack->alloc_bytes += n;
		prof_samples++;
	} else if (f) {
		f->b.chain.next = far_spare;
		far_spare = &f->b.chain;
	}
	prof_unlock();
	return ok;
}

/* A sampled block as the program asked for it, recorded apart: a large or
 * huge block, which free's slow path reports to prof_far_gone. A block
 * that cannot be recorded is the program's all the same, unsampled. */
static void *prof_alloc_far(size_t n, size_t align, bool zero, const void *const *pc,
			    unsigned depth)
{
	bool zeroed = false;
	/* aligned to 16 at least: not from the start-up arena, whose frees
	 * do not tell prof_far_gone */
	void *p = malloc_large_or_huge(n, align > 16 ? align : 16, zero ? &zeroed : NULL);

	if (p) {
		prof_record_far(p, n, pc, depth);
		if (zero && !zeroed)
			memset(p, 0, n);
	}
	return p;
}

/* The sampled block of n bytes, aligned to align, allocated at site: a
 * large or huge one as it is (prof_alloc_far), while the sample is one of
 * many (USLAB_PROF_SAMPLE > 1: every one keeps its header, so that free
 * tells each misuse apart alike); else the program's bytes behind a
 * header, in a block of the profiler's. */
void *prof_alloc(size_t n, size_t align, bool zero, const void *site)
{
	const void *pc[PROF_DEPTH];
	size_t front = align > PROF_FRONT ? align : PROF_FRONT, total;
	void *user = NULL;

	prof_inside = true;
	unsigned depth = prof_backtrace(pc, site);
	if (prof_mean > 1 && kmalloc_aligned_class(align > 16 ? align : 16, n) == NR_CLASSES) {
		user = prof_alloc_far(n, align, zero, pc, depth);
	} else if (front > UINT32_MAX || __builtin_add_overflow(n ? n : 1, front, &total)) {
		errno = ENOMEM;
	} else {
		char *base = kmalloc_aligned(align > 16 ? align : 16, total);

		if (base && prof_record(base, front, n, pc, depth)) {
			user = base + front;
			if (zero)
				memset(user, 0, n);
		} else if (base) {
			kfree_direct(base, "malloc");
			errno = ENOMEM;
		}
	}
	prof_inside = false;
	return user;
}

/* A block of n bytes as without the profiler. */
static inline void *prof_unsampled(size_t n)
{
	return likely(n <= SMALL_MAX) ? kmalloc_direct(n) : malloc_large_or_huge(n, 0, NULL);
}

/* prof_malloc_call's block when its interval has run out (or none is
 * drawn, or the thread is sampling). */
static noinline void *prof_malloc_due(size_t n, const void *site)
{
	if (prof_due_slow(n))
		return prof_alloc(n, 0, false, site);
	return prof_unsampled(n);
}

/* malloc while the profiler is on (kmalloc_divert): every block the
 * program asks for, its bytes counted as prof_sample_due counts them; a
 * block the sample point falls in is made by prof_alloc, any other as
 * without the profiler. The count is written out here rather than called,
 * so that the common way makes no call and needs no frame. */
static void *prof_malloc_call(size_t n, const void *site)
{
	uint64_t left = prof_left;

	if (unlikely(n >= left))
		return prof_malloc_due(n, site);
	prof_left = left - n;
	return prof_unsampled(n);
}

/* Whether p may be a sampled block, without the lock: a block's bucket is
 * not empty from its insertion, which the caller (owning p) saw happen, to
 * its free. */
static bool prof_maybe(const void *p)
{
	/* acquire: pairs with table_grow's release of a new table */
	struct prof_table *t = smp_load_acquire(&blocks);

	return t && READ_ONCE(t->heads[addr_hash((uintptr_t)p) & t->mask]);
}

/* Whether p is a sampled block (the caller owns p: it stays what it is).
 * The caller has made sure that p is not where a small block starts
 * (kmalloc_block): no sampled one does, as each sits inside a block of
 * its own, so most pointers realloc is given are never looked up here. */
bool prof_owns(const void *p)
{
	struct link **where;

	prof_found_user = NULL;
	if (!prof_maybe(p))
		return false;
	prof_lock_take();
	struct prof_block *b = block_find(p, &where);
	prof_unlock();
	prof_found_user = b ? p : NULL;
	prof_found = b;
	return b != NULL;
}

/* kfree_direct's question about p, at which no kmalloc block starts: a
 * sampled block is taken out of the table and its kmalloc block freed. */
static bool prof_free_stray(void *p, const char *call)
{
	struct link **where;
	struct prof_block *b;
	size_t front = 0;

	if (!prof_maybe(p))
		return false;
	prof_lock_take();
	b = block_find(p, &where);
	if (b) {
		WRITE_ONCE(*where, b->chain.next);
		blocks->count--;
		b->stack->live_blocks--;
		b->stack->live_bytes -= b->size;
		front = b->front;
	}
	prof_unlock();
	if (!b)   /* not a sampled block, or freed meanwhile: a double free */
		return false;
	kfree_direct((char *)p - front, call);
	return true;
}

/* free's slow path about large or huge block p (kmalloc_divert_gone),
 * which it has made sure is one and is about to free: if it is sampled,
 * out of the table (a header's block is not one: its user pointer starts
 * no block). */
static void prof_far_gone(void *p)
{
	struct link **where;
	struct prof_block *b;

	if (!prof_maybe(p))
		return;
	prof_lock_take();
	b = block_find(p, &where);
	if (b && !b->front) {
		WRITE_ONCE(*where, b->chain.next);
		blocks->count--;
		b->stack->live_blocks--;
		b->stack->live_bytes -= b->size;
		b->chain.next = far_spare;
		far_spare = &b->chain;
	}
	prof_unlock();
}

/* The front of sampled block p (the caller owns p): 0 for one recorded
 * apart. */
static size_t prof_front(const void *p)
{
	struct link **where;

	if (p == prof_found_user)
		return prof_found->front;
	prof_lock_take();
	struct prof_block *b = block_find(p, &where);
	size_t front = b ? b->front : 0;
	prof_unlock();
	return front;
}

/* Bytes usable at sampled block p. */
size_t prof_usable_size(const void *p)
{
	size_t front = prof_front(p);

	return kmalloc_usable_size((const char *)p - front, "malloc_usable_size") - front;
}

/* Lock held: sampled block b is n bytes now; its stack's counts follow. */
static void block_resized(struct prof_block *b, size_t n)
{
	b->stack->live_bytes += n - b->size;   /* modulo 2^64: a shrink too */
	if (n > b->size)
		b->stack->alloc_bytes += n - b->size;
	b->size = n;
}

/* Lock held: sampled block b, taken out of the table for a resize, goes
 * back in, at n bytes if resized, else as it was; the lock is dropped. */
static void block_back_resized(struct prof_block *b, bool resized, size_t n)
{
	if (resized)
		block_resized(b, n);
	table_insert(blocks, &b->chain, block_key(&b->chain));   /* the room it had */
	prof_unlock();
}

/* realloc's move of p (have usable bytes) to a new block of n, which is a
 * new allocation (sampled or not, by the count); the caller frees p. */
static void *prof_realloc_copy(const void *p, size_t n, size_t have, const void *site)
{
	void *q = prof_malloc_call(n, site);

	if (q)
		memcpy(q, p, have < n ? have : n);
	return q;
}

/* realloc of p, a sampled block recorded apart (have bytes usable at p):
 * resized as any block is (kmalloc_resize; moved by mremap perhaps), its
 * record following it out of the table meanwhile, so that a run moved and
 * freed inside is not taken for it; else moved to a new allocation
 * (sampled or not, by the count) and freed. */
static void *prof_realloc_far(void *p, size_t n, size_t have, const void *site)
{
	struct link **where;
	struct prof_block *b;

	prof_lock_take();
	b = block_find(p, &where);
	WRITE_ONCE(*where, b->chain.next);
	blocks->count--;
	prof_unlock();
	void *q = kmalloc_resize(p, n);
	prof_lock_take();
	container_of(b, struct prof_far, b)->user = q ? q : p;
	block_back_resized(b, q != NULL, n);
	if (q)
		return q;
	q = prof_realloc_copy(p, n, have, site);
	if (q)
		kfree(p, "realloc");
	return q;
}

/* Sampled block p resized to n where its kmalloc block allows it
 * (kmalloc_resize: in place, or a large run or huge mapping moved whole,
 * header and all): still sampled, at its stack. NULL: not resized. */
static void *prof_resize(void *p, size_t n)
{
	struct prof_block *b = (struct prof_block *)p - 1;
	size_t front = b->front, total;
	char *base = (char *)p - front, *q;
	struct link **where;

	if (__builtin_add_overflow(n ? n : 1, front, &total))
		return NULL;
	prof_lock_take();   /* out of the table while kmalloc_resize may move it */
	if (block_find(p, &where)) {
		WRITE_ONCE(*where, b->chain.next);
		blocks->count--;
	}
	prof_unlock();
	q = kmalloc_resize(base, total);
	b = (struct prof_block *)((q ? q : base) + front) - 1;
	prof_lock_take();
	block_back_resized(b, q != NULL, n);
	return q ? q + front : NULL;
}

/* realloc of sampled block p, grown to n bytes within the room it has
 * (have bytes usable at p): nothing moves, so it stays in the table, and
 * only its counts change - one lookup under the lock. False: n is beyond
 * the room or a shrink (which kmalloc_resize may move to a smaller block). */
static bool prof_grow_within(void *p, size_t n, size_t have)
{
	struct link **where;
	struct prof_block *b;
	bool done;

	if (n > have)
		return false;
	prof_lock_take();
	b = block_find(p, &where);
	done = b && n >= b->size;
	if (done)
		block_resized(b, n);
	prof_unlock();
	return done;
}

/* realloc of sampled block p: grown within its room or resized where it
 * is (prof_resize), else moved, the new block a new allocation (sampled or
 * not, by the count). */
void *prof_realloc(void *p, size_t n, const void *site)
{
	bool far = !prof_front(p);
	size_t have = far ? kmalloc_usable_size(p, "realloc") : prof_usable_size(p);

	if (prof_grow_within(p, n, have))
		return p;
	if (far)
		return prof_realloc_far(p, n, have, site);

	void *q = prof_resize(p, n);

	if (q)
		return q;
	q = prof_realloc_copy(p, n, have, site);
	if (q && !prof_free_stray(p, "realloc"))
		free_invalid(p, "realloc");
	return q;
}

/*
 * A block not sampled that realloc grew in place by growth bytes, which
 * made the count due: an allocation of growth bytes at the realloc's stack,
 * in the counters of allocations only. The block itself is not followed:
 * to be, it would have to move into a sampled block, a copy of every byte
 * where the resize (mremap, or a run grown into free units) copied none -
 * realloc_grow's vectors, doubling to 4 MiB, ran 5 times as long so.
 */
void prof_grown(size_t growth, const void *site)
{
	const void *pc[PROF_DEPTH];

	prof_inside = true;
	unsigned depth = prof_backtrace(pc, site);
	prof_lock_take();
	struct prof_stack *s = stack_get(pc, depth);
	if (s) {
		s->alloc_blocks++, s->alloc_bytes += growth;
		prof_samples++;
	}
	prof_unlock();
	prof_inside = false;
}

/* ---- the summary at exit ---------------------------------------------------------------- */

/* What one allocation site's sampled blocks stand for. */
struct site_sum {
	const void *site;
	double alloc_bytes, alloc_blocks, live_bytes, live_blocks;
	uint64_t live_samples;
};

/* The sites, summed from every stack's counters into a table of their own
 * (open addressing by site; *nsites set), or NULL. Taken under the lock,
 * so the table is mapped first. */
static struct site_sum *sites_gather(size_t *nsites, size_t *cap)
{
	prof_lock_take();
	size_t want = 16;
	while (want < 2 * (stacks->count + 1))
		want *= 2;
	prof_unlock();
	size_t bytes = round_up(want * sizeof(struct site_sum), os_page_size());
	struct site_sum *t = os_map_aligned(bytes, os_page_size());

	*cap = want;
	*nsites = 0;
	if (!t)
		return NULL;
	prof_lock_take();
	for (struct prof_stack *s = newest; s; s = s->older) {
		size_t k = addr_hash((uintptr_t)s->pc[0]) & (want - 1);
		double as = prof_scale(s->alloc_blocks, s->alloc_bytes);
		double ls = prof_scale(s->live_blocks, s->live_bytes);

		while (t[k].site && t[k].site != s->pc[0])
			k = (k + 1) & (want - 1);
		if (!t[k].site) {
			if (*nsites + 1 >= want)   /* stacks made since the count: left out */
				break;
			t[k].site = s->pc[0];
			(*nsites)++;
		}
		t[k].alloc_bytes += as * (double)s->alloc_bytes;
		t[k].alloc_blocks += as * (double)s->alloc_blocks;
		t[k].live_bytes += ls * (double)s->live_bytes;
		t[k].live_blocks += ls * (double)s->live_blocks;
		t[k].live_samples += s->live_blocks;
	}
	prof_unlock();
	return t;
}

/* The rows sites[0..top) by field (alloc_bytes or live_bytes), largest
 * first: a selection, moving each next largest to the front. */
static size_t sites_top(struct site_sum *t, size_t cap, size_t top, size_t field)
{
	size_t n = 0;

	for (size_t i = 0; i < cap; i++)   /* pack the used slots first */
		if (t[i].site)
			t[n++] = t[i];
	for (size_t i = 0; i < top && i < n; i++) {
		size_t best = i;

		for (size_t j = i + 1; j < n; j++)
			if (*(double *)((char *)&t[j] + field) > *(double *)((char *)&t[best] + field))
				best = j;
		struct site_sum x = t[i];
		t[i] = t[best];
		t[best] = x;
	}
	return n;
}

static void summary_rows(struct prof_out *o, struct site_sum *t, size_t n, size_t top, bool live)
{
	double total = 0;
	char amount[HUMAN_LEN], name[256];

	for (size_t i = 0; i < n; i++)
		total += live ? t[i].live_bytes : t[i].alloc_bytes;
	for (size_t i = 0; i < top && i < n; i++) {
		double bytes = live ? t[i].live_bytes : t[i].alloc_bytes;
		double count = live ? t[i].live_blocks : t[i].alloc_blocks;

		if (bytes <= 0)
			break;
		human(amount, (size_t)(bytes + 0.5));
		debug_site_name(t[i].site, name, sizeof(name));
		out_printf(o, "uslab:   %10s %5.1f %%  %10.0f blocks  %s\n", amount,
			   total > 0 ? 100 * bytes / total : 0, count, name);
	}
}

/* At exit, on stderr: where the profile went, the top sites by bytes
 * allocated, and the leak report: the sites of blocks still live. */
static void prof_summary(const char *path, int err)
{
	struct prof_out o = { .fd = 2 };
	size_t top = (size_t)option(OPT_PROF_TOP), n, cap;
	char mean[HUMAN_LEN], rate[96] = "every one", amount[HUMAN_LEN];

	human(mean, (size_t)prof_mean);
	if (prof_mean > 1)
		snprintf(rate, sizeof(rate), "1 per %s allocated on average", mean);
	if (err)
		out_printf(&o, "uslab: prof: could not write the heap profile %s: %s\n", path,
			   strerror(-err));
	else
		out_printf(&o, "uslab: prof: heap profile in %s (%llu blocks sampled, %s; "
			       "google-pprof --text PROGRAM %s)\n", path,
			   (unsigned long long)READ_ONCE(prof_samples), rate, path);
	struct site_sum *t = top ? sites_gather(&n, &cap) : NULL;
	if (t) {
		n = sites_top(t, cap, top, offsetof(struct site_sum, alloc_bytes));
		out_printf(&o, "uslab: prof: the top allocation sites by bytes allocated (estimated):\n");
		summary_rows(&o, t, n, top, false);
		n = sites_top(t, n, top, offsetof(struct site_sum, live_bytes));
		double live = 0, blocks_live = 0;
		uint64_t samples = 0;
		for (size_t i = 0; i < n; i++)
			live += t[i].live_bytes, blocks_live += t[i].live_blocks,
				samples += t[i].live_samples;
		if (samples) {
			human(amount, (size_t)(live + 0.5));
			out_printf(&o, "uslab: prof: leaks: %s in %.0f blocks live at exit (estimated "
				       "from %llu sampled), by allocation site:\n", amount, blocks_live,
				   (unsigned long long)samples);
			summary_rows(&o, t, n, top, true);
		}
		os_unmap(t, round_up(cap * sizeof(*t), os_page_size()));
	}
	out_flush(&o);
}

/* ---- start and end ------------------------------------------------------------------------ */

struct self_search {
	uintptr_t pc;
	int object;   /* objects seen: the first is the program */
};

/* The executable segment holding this file's code, if it is not the
 * program's own (a shared object): self_lo, self_hi. */
static int find_self(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct self_search *s = arg;

	(void)size;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr;

		if (ph->p_type != PT_LOAD || s->pc - lo >= ph->p_memsz)
			continue;
		if (s->object > 0) {
			self_lo = lo;
			self_hi = lo + ph->p_memsz;
		}
		return 1;
	}
	s->object++;
	return 0;
}

/* Decided once, before the program's threads, after the debug mode. */
every_process __attribute__((constructor)) static void prof_at_load(void)
{
	char entry[64];

	options_init();
	if (!option(OPT_PROF))
		return;
	if (debug_resolve()) {
		options_warn_ignored("USLAB_PROF=1", ": USLAB_DEBUG=1 is on, and the debug mode "
						     "and the profiler do not run together");
		options_mark_warned();
		return;
	}
	prof_mean = option(OPT_PROF_SAMPLE) > 0 ? (uint64_t)option(OPT_PROF_SAMPLE) : 1;
	prof_seed = os_random64();
	blocks = table_new(4096);
	stacks = table_new(1024);
	if (!blocks || !stacks)
		return;
	struct self_search self = { (uintptr_t)prof_at_load, 0 };
	dl_iterate_phdr(find_self, &self);
	/* the unwinder's set-up may allocate (backtrace's, where it is the
	 * unwinder): now, and unsampled */
	prof_inside = true;
	unwind_init();
	prof_inside = false;

	int sig = (int)option(OPT_PROF_SIGNAL);
	if (sig > 0 && sig == option(OPT_STATS_SIGNAL)) {
		snprintf(entry, sizeof(entry), "USLAB_PROF_SIGNAL=%d", sig);
		options_warn_ignored(entry, ": USLAB_STATS_SIGNAL has that signal");
		options_mark_warned();
	} else if (sig > 0) {
		struct sigaction sa;

		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = prof_signal;
		sa.sa_flags = SA_RESTART;
		sigemptyset(&sa.sa_mask);
		sigaction(sig, &sa, NULL);
	}
	WRITE_ONCE(prof_on, true);
	/* the stray hook first: no sampled block may exist without it */
	kmalloc_divert_stray(prof_free_stray);
	if (prof_mean > 1)
		kmalloc_divert_gone(prof_far_gone);
	kmalloc_divert(prof_malloc_call, NULL);
}

/* At exit, profiling: the profile, and its summary if asked for. */
static noinline cold void prof_write_at_exit(void)
{
	char path[PROF_PATH];

	prof_lock_take();
	int err = dump_locked(profile_pattern(), path);
	prof_unlock();
	if (err == -ENAMETOOLONG)
		snprintf(path, sizeof(path), "%s", profile_pattern());
	if (option(OPT_PROF_TOP) > 0 || err)
		prof_summary(path, err);
}

/* A destructor, run by every process: with the code that runs
 * (cold-text.ld), its work out of line with the cold. */
every_process __attribute__((destructor)) static void prof_at_exit(void)
{
	if (READ_ONCE(prof_on))
		prof_write_at_exit();
}
