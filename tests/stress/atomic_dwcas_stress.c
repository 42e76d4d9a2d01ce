/*
 * atomic_dwcas_stress - a lock-free Treiber stack whose head is one dword_t,
 * changed only by dwcas_try_cmpxchg, hammered by 4 threads.
 *
 *   head.lo   top node (NULL when empty)
 *   head.hi   63          32 31           0
 *            +--------------+--------------+
 *            |  generation  |    count     |    count: nodes on the stack
 *            +--------------+--------------+    generation: +1 per push/pop
 *
 * The generation makes the stack ABA-safe: a pop that read top and
 * top->next, stalled while top was popped and pushed back, fails its CAS
 * because the generation moved on. One pop in 256 stalls on purpose in that
 * window, so a CAS that compared only the pointer word gets caught. Nodes
 * come from a fixed pool and are never freed, so reading a stale top->next
 * is memory-safe.
 *
 * Checked:
 *   - every successful CAS saw a consistent pair (top NULL <=> count 0,
 *     count <= pool size);
 *   - a popped node is marked "on the stack" and carries the checksum of its
 *     address and version; the popper then owns it (owner = thread), and a
 *     push requires the pusher to own it - so no node is ever held by two
 *     threads, which TSan would also see on the plain fields;
 *   - after each phase every thread has pushed back what it held, and the
 *     nodes reachable from top are exactly the pool, each once, all marked,
 *     their number equal to head's count; the generation equals the number
 *     of successful pushes and pops (no lost update).
 * Phases: the native path, then the locked path (dwcas_set_path between
 * phases, no thread running). With USLAB_DWCAS=0 in the environment (the
 * .lockpath ctest variant) only the locked path runs, and the test checks
 * that the environment was honoured.
 * Duration: USLAB_STRESS_SECONDS (default 2 s) split over the phases.
 */
#include "test.h"
#include "dwcas.h"

#include <pthread.h>
#include <unistd.h>

#define NTHREADS 4
#define POOL 512
#define MAX_HELD 24
#define ON_STACK (-1L)
#define COUNT_MASK 0xffffffffull

struct node {
	struct node *next;      /* READ_ONCE/WRITE_ONCE: stale pops read it */
	long owner;             /* plain: ON_STACK, or the holding thread */
	unsigned long version;  /* plain: bumped on every push */
	unsigned long sum;      /* plain: checksum(node, version) */
};

static dword_t head;
static struct node pool[POOL];
static atomic_t stop;
static atomic_long_t ops;       /* successful CASes of this phase */

static unsigned long checksum(const struct node *n, unsigned long version)
{
	return ((uintptr_t)n * 0x9E3779B97F4A7C15ul) ^ (version << 17) ^ 0x5a5a5a5aul;
}

static uint32_t count_of(dword_t d) { return (uint32_t)(d.hi & COUNT_MASK); }
static uint32_t gen_of(dword_t d) { return (uint32_t)(d.hi >> 32); }

static dword_t make_head(struct node *top, uint32_t gen, uint32_t count)
{
	return (dword_t){ .lo = (uintptr_t)top, .hi = ((uintptr_t)gen << 32) | count };
}

static void check_seen(dword_t d, const char *op)
{
	if ((d.lo == 0) != (count_of(d) == 0) || count_of(d) > POOL) {
		fprintf(stderr, "%s: CAS succeeded on an inconsistent head "
			"(top %p, count %u)\n", op, (void *)d.lo, count_of(d));
		exit(1);
	}
}

static void push(struct node *n, long me)
{
	dword_t old, nw;

	REQUIRE(n->owner == me);
	n->owner = ON_STACK;
	n->version++;
	n->sum = checksum(n, n->version);
	old = dwcas_read(&head);
	do {
		WRITE_ONCE(n->next, (struct node *)old.lo);
		nw = make_head(n, gen_of(old) + 1, count_of(old) + 1);
	} while (!dwcas_try_cmpxchg(&head, &old, nw));
	check_seen(old, "push");
	REQUIRE(count_of(old) < POOL);
}

/* stall: widen the window between reading top->next and the CAS, as a
 * preemption there would, so that ABA has a chance to happen. */
static struct node *pop(long me, bool stall)
{
	dword_t old = dwcas_read(&head), nw;
	struct node *top;

	do {
		top = (struct node *)old.lo;
		if (!top)
			return NULL;    /* empty, or a torn guess: the caller retries later */
		nw = make_head(READ_ONCE(top->next), gen_of(old) + 1, count_of(old) - 1);
		if (stall) {
			stall = false;
			for (int i = 0; i < 1000; i++)
				cpu_relax();
		}
	} while (!dwcas_try_cmpxchg(&head, &old, nw));
	check_seen(old, "pop");
	if (top->owner != ON_STACK || top->sum != checksum(top, top->version)) {
		fprintf(stderr, "popped node %td: owner %ld (want on-stack), "
			"sum %#lx (want %#lx)\n", top - pool, top->owner, top->sum,
			checksum(top, top->version));
		exit(1);
	}
	top->owner = me;
	return top;
}

static void *worker(void *arg)
{
	long me = (long)(intptr_t)arg;
	uint64_t seed = 0xfeedull * (me + 1);
	struct node *held[MAX_HELD];
	int nheld = 0;
	long mine = 0;

	while (!atomic_read(&stop)) {
		uint64_t r = test_rand(&seed);

		if (nheld < MAX_HELD && (nheld == 0 || (r & 1))) {
			struct node *n = pop(me, (r & 0xff00) == 0);

			if (n) {
				held[nheld++] = n;
				mine++;
			}
		} else {
			/* push back a random held node: the order on the stack churns */
			int i = (int)((r >> 8) % (uint64_t)nheld);
			struct node *n = held[i];

			held[i] = held[--nheld];
			push(n, me);
			mine++;
		}
	}
	while (nheld) {
		push(held[--nheld], me);
		mine++;
	}
	atomic_long_add(mine, &ops);
	return NULL;
}

/* Walk the stack with no thread running: it must hold the pool exactly. */
static void check_whole_stack(const char *phase, uint32_t want_gen)
{
	static unsigned char seen[POOL];
	dword_t h = dwcas_read_stable(&head);
	unsigned long walked = 0;

	memset(seen, 0, sizeof(seen));
	for (struct node *n = (struct node *)h.lo; n; n = n->next) {
		long i = n - pool;

		if (i < 0 || i >= POOL || seen[i]) {
			fprintf(stderr, "%s: node %ld %s on the stack\n", phase, i,
				(i < 0 || i >= POOL) ? "not from the pool" : "twice");
			exit(1);
		}
		seen[i] = 1;
		walked++;
		CHECK(n->owner == ON_STACK);
		CHECK(n->sum == checksum(n, n->version));
	}
	if (walked != POOL || count_of(h) != POOL || gen_of(h) != want_gen) {
		fprintf(stderr, "%s: %lu nodes reachable, head count %u, pool %d; "
			"generation %u, successful ops %u\n", phase, walked,
			count_of(h), POOL, gen_of(h), want_gen);
		test_failures++;
	}
}

static void run_phase(enum dwcas_path path, double seconds)
{
	pthread_t t[NTHREADS];
	dword_t before = dwcas_read_stable(&head);

	REQUIRE(dwcas_set_path(path));
	REQUIRE(dwcas_path() == path);
	atomic_set(&stop, 0);
	atomic_long_set(&ops, 0);
	for (long i = 0; i < NTHREADS; i++)
		REQUIRE(pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) == 0);
	test_sleep_ms((long)(seconds * 1000));
	atomic_set(&stop, 1);
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(t[i], NULL);

	printf("%s: %ld pushes+pops\n", dwcas_path_name(), atomic_long_read(&ops));
	CHECK(atomic_long_read(&ops) > 0);
	check_whole_stack(dwcas_path_name(),
			  gen_of(before) + (uint32_t)atomic_long_read(&ops));
}

static bool env_forces_locked(void)
{
	const char *v = getenv("USLAB_DWCAS");

	return v && (!strcmp(v, "0") || !strcmp(v, "lock") || !strcmp(v, "locked"));
}

int main(void)
{
	double secs = test_stress_seconds(2.0);
	bool locked_only = env_forces_locked();

	if (secs > 10)
		secs = 10;
	CHECK((uintptr_t)&head % 16 == 0);
	if (locked_only && dwcas_path() != DWCAS_LOCKED) {
		fprintf(stderr, "USLAB_DWCAS=%s but dwcas chose %s\n",
			getenv("USLAB_DWCAS"), dwcas_path_name());
		return 1;
	}

	/* Fill the stack from the pool, one thread, through the same push. */
	for (int i = 0; i < POOL; i++) {
		pool[i].owner = 0;
		push(&pool[i], 0);
	}
	check_whole_stack("initial", POOL);

	if (locked_only) {
		printf("USLAB_DWCAS forces the locked path: one phase\n");
		run_phase(DWCAS_LOCKED, secs);
	} else if (!dwcas_native_available()) {
		test_skip("no native double-width CAS on this CPU: the native path is not "
			  "checked, the locked path only");
		run_phase(DWCAS_LOCKED, secs);
	} else {
		run_phase(DWCAS_NATIVE, secs / 2);
		run_phase(DWCAS_LOCKED, secs / 2);
	}
	return test_done("atomic_dwcas_stress");
}
