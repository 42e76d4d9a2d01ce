/*
 * atomic_qspinlock_unit - the queued lock's word after each step.
 *
 * Single-threaded: lock/trylock/unlock values and 70000 pairs leaving no
 * residue. Then a scripted hand-off with helper threads that walks the word
 * through every state of the layout:
 *
 *   main holds                       0,0,1
 *   B contends: the pending waiter   0,1,1
 *   C contends: first queued node    tC,1,1   (C's row points at its nodes)
 *   D contends: queued behind C      tD,1,1   (C's node->next is D's node)
 *   main unlocks: B takes over       tD,0,1
 *   B unlocks: C (head) takes it     tD,0,1   (C's row is given back)
 *   C unlocks: D is last, clears it  0,0,1
 *   D unlocks                        0,0,0
 *
 * and checks the FIFO order B, C, D. Last, with every row of the slot table
 * taken, a third contender must fall back to spinning on trylock without
 * touching the tail.
 */
#include "test.h"
#include "qspinlock.h"

#include <pthread.h>
#include <unistd.h>

#define PAIRS 70000

static qspinlock_t lock = QSPINLOCK_INIT;
static atomic_t seq;
static long shared_value;               /* plain: only under the lock */

struct helper {
	pthread_t tid;
	int name;
	atomic_t started, order, go, done;
	long saw;
};

static uint32_t word(void) { return (uint32_t)atomic_read(&lock.val); }
static uint32_t tail_of(uint32_t v) { return v & QSPIN_TAIL_MASK; }
static unsigned slot_of(uint32_t v) { return v >> QSPIN_TAIL_SLOT_OFFSET; }
static unsigned idx_of(uint32_t v) { return (v >> QSPIN_TAIL_IDX_OFFSET) & 3; }

static void *helper_main(void *arg)
{
	struct helper *h = arg;

	atomic_set_release(&h->started, 1);
	qspin_lock(&lock);
	REQUIRE(READ_ONCE(lock.locked) == QSPIN_LOCKED_VAL);
	h->saw = shared_value;
	shared_value = h->name;
	atomic_set_release(&h->order, atomic_inc_return(&seq));
	while (!atomic_read_acquire(&h->go))
		sched_yield();
	qspin_unlock(&lock);
	atomic_set_release(&h->done, 1);
	return NULL;
}

/* Wait (bounded) until the word equals want; say what it was otherwise. */
static void wait_word(uint32_t want, uint32_t mask, const char *what)
{
	double deadline = test_now() + 10;

	while ((word() & mask) != want) {
		if (test_now() > deadline) {
			fprintf(stderr, "%s: word %#x, wanted %#x under mask %#x\n",
				what, word(), want, mask);
			exit(1);
		}
		sched_yield();
	}
}

static void wait_flag(atomic_t *f, const char *what)
{
	double deadline = test_now() + 10;

	while (!atomic_read_acquire(f)) {
		if (test_now() > deadline) {
			fprintf(stderr, "timed out waiting for %s (word %#x)\n", what, word());
			exit(1);
		}
		sched_yield();
	}
}

static void start(struct helper *h, int name)
{
	h->name = name;
	REQUIRE(pthread_create(&h->tid, NULL, helper_main, h) == 0);
	wait_flag(&h->started, "a helper to start");
}

static void test_single_thread(void)
{
	qspinlock_t l;

	CHECK_EQ(sizeof(qspinlock_t), 4);
	qspin_lock_init(&l);
	CHECK_EQ(atomic_read(&l.val), 0);
	CHECK(!qspin_is_locked(&l));

	qspin_lock(&l);
	CHECK_EQ(atomic_read(&l.val), QSPIN_LOCKED_VAL);
	CHECK_EQ(l.locked, 1);
	CHECK_EQ(l.pending, 0);
	CHECK_EQ(l.tail, 0);
	CHECK(qspin_is_locked(&l));
	CHECK(!qspin_is_contended(&l));
	CHECK(!qspin_trylock(&l));
	CHECK_EQ(atomic_read(&l.val), QSPIN_LOCKED_VAL);
	qspin_unlock(&l);
	CHECK_EQ(atomic_read(&l.val), 0);
	CHECK(!qspin_is_locked(&l));

	CHECK(qspin_trylock(&l));
	CHECK_EQ(atomic_read(&l.val), QSPIN_LOCKED_VAL);
	CHECK(!qspin_trylock(&l));
	qspin_unlock(&l);
	CHECK_EQ(atomic_read(&l.val), 0);

	/* a pending bit or a tail alone makes the lock busy for trylock */
	atomic_set(&l.val, QSPIN_PENDING_VAL);
	CHECK(qspin_is_locked(&l));
	CHECK(qspin_is_contended(&l));
	CHECK(!qspin_trylock(&l));
	atomic_set(&l.val, 5 << QSPIN_TAIL_SLOT_OFFSET);
	CHECK(!qspin_trylock(&l));
	CHECK_EQ(atomic_read(&l.val), 5 << QSPIN_TAIL_SLOT_OFFSET);
	qspin_lock_init(&l);

	for (unsigned i = 0; i < PAIRS; i++) {
		if (i & 1)
			REQUIRE(qspin_trylock(&l));
		else
			qspin_lock(&l);
		if (atomic_read(&l.val) != (int)QSPIN_LOCKED_VAL) {
			fprintf(stderr, "pair %u: word %#x while held\n", i, atomic_read(&l.val));
			exit(1);
		}
		qspin_unlock(&l);
		if (atomic_read(&l.val) != 0) {
			fprintf(stderr, "pair %u: word %#x after unlock\n", i, atomic_read(&l.val));
			exit(1);
		}
	}
}

static void test_queue_states(void)
{
	struct helper b = { 0 }, c = { 0 }, d = { 0 };
	const uint32_t held_pending = QSPIN_LOCKED_VAL | QSPIN_PENDING_VAL;
	uint32_t tail_c, tail_d;
	struct qspin_node *node_c, *node_d;

	qspin_lock(&lock);
	shared_value = 1;
	CHECK_EQ(word(), QSPIN_LOCKED_VAL);

	start(&b, 2);
	wait_word(held_pending, ~0u, "B to become the pending waiter");

	start(&c, 3);
	{
		double deadline = test_now() + 10;

		while (!tail_of(word())) {
			REQUIRE(test_now() < deadline);
			sched_yield();
		}
	}
	tail_c = tail_of(word());
	CHECK_EQ(word(), tail_c | held_pending);
	CHECK_EQ(idx_of(tail_c), 0);
	CHECK(slot_of(tail_c) >= 1 && slot_of(tail_c) <= QSPIN_SLOTS);
	node_c = READ_ONCE(__qspin_slots[slot_of(tail_c) - 1]);
	CHECK(node_c != NULL);
	CHECK(qspin_is_contended(&lock));

	start(&d, 4);
	{
		double deadline = test_now() + 10;

		while (tail_of(word()) == tail_c) {
			REQUIRE(test_now() < deadline);
			sched_yield();
		}
	}
	tail_d = tail_of(word());
	CHECK_EQ(word(), tail_d | held_pending);
	CHECK_EQ(idx_of(tail_d), 0);
	CHECK(slot_of(tail_d) != slot_of(tail_c));
	node_d = READ_ONCE(__qspin_slots[slot_of(tail_d) - 1]);
	CHECK(node_d != NULL && node_d != node_c);
	{
		/* D linked itself behind C */
		double deadline = test_now() + 10;

		while (READ_ONCE(node_c->next) != node_d) {
			REQUIRE(test_now() < deadline);
			sched_yield();
		}
	}

	/* Nobody got in while we held it. */
	CHECK_EQ(atomic_read(&seq), 0);

	/* main -> B (pending): P is cleared as B sets locked, the tail stays. */
	shared_value = 10;
	qspin_unlock(&lock);
	wait_flag(&b.order, "B to get the lock");
	CHECK_EQ(atomic_read(&b.order), 1);
	CHECK_EQ(b.saw, 10);
	CHECK_EQ(word(), tail_d | QSPIN_LOCKED_VAL);

	/* B -> C: C is head but not last, so it sets locked and hands over. */
	atomic_set_release(&b.go, 1);
	wait_flag(&c.order, "C to get the lock");
	CHECK_EQ(atomic_read(&c.order), 2);
	CHECK_EQ(c.saw, 2);
	CHECK_EQ(word(), tail_d | QSPIN_LOCKED_VAL);
	CHECK(READ_ONCE(__qspin_slots[slot_of(tail_c) - 1]) == NULL);
	CHECK(READ_ONCE(__qspin_slots[slot_of(tail_d) - 1]) == node_d);

	/* C -> D: D is last, takes the lock and clears the tail in one CAS. */
	atomic_set_release(&c.go, 1);
	wait_flag(&d.order, "D to get the lock");
	CHECK_EQ(atomic_read(&d.order), 3);
	CHECK_EQ(d.saw, 3);
	CHECK_EQ(word(), QSPIN_LOCKED_VAL);
	CHECK(READ_ONCE(__qspin_slots[slot_of(tail_d) - 1]) == NULL);

	atomic_set_release(&d.go, 1);
	pthread_join(b.tid, NULL);
	pthread_join(c.tid, NULL);
	pthread_join(d.tid, NULL);
	CHECK_EQ(word(), 0);
	CHECK(!qspin_is_locked(&lock));
	qspin_lock(&lock);
	CHECK_EQ(shared_value, 4);
	qspin_unlock(&lock);
}

/* With no free row a contender spins on trylock: the tail stays 0. */
static void test_no_free_slot(void)
{
	static struct qspin_node dummy;
	struct helper b = { 0 }, c = { 0 };

	for (int i = 0; i < QSPIN_SLOTS; i++)
		WRITE_ONCE(__qspin_slots[i], &dummy);
	atomic_set(&seq, 0);

	qspin_lock(&lock);
	start(&b, 5);
	wait_word(QSPIN_LOCKED_VAL | QSPIN_PENDING_VAL, ~0u, "B to become pending");
	start(&c, 6);
	for (int i = 0; i < 20; i++) {     /* C keeps trying for a while */
		usleep(1000);
		CHECK_EQ(word(), QSPIN_LOCKED_VAL | QSPIN_PENDING_VAL);
		CHECK_EQ(atomic_read(&seq), 0);
	}
	qspin_unlock(&lock);
	atomic_set_release(&b.go, 1);
	atomic_set_release(&c.go, 1);
	pthread_join(b.tid, NULL);
	pthread_join(c.tid, NULL);
	CHECK_EQ(atomic_read(&seq), 2);
	CHECK_EQ(word(), 0);
	for (int i = 0; i < QSPIN_SLOTS; i++) {
		if (READ_ONCE(__qspin_slots[i]) != &dummy) {
			fprintf(stderr, "row %d changed while the table was full\n", i);
			exit(1);
		}
		WRITE_ONCE(__qspin_slots[i], NULL);
	}
}

int main(void)
{
	test_single_thread();
	test_queue_states();
	test_no_free_slot();
	return test_done("atomic_qspinlock_unit");
}
