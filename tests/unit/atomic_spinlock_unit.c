/*
 * atomic_spinlock_unit - the ticket lock's word after each operation, trylock
 * and is_locked/is_contended, the 16-bit halves wrapping after 70000
 * lock/unlock pairs, and FIFO hand-off to a second thread.
 */
#include "test.h"
#include "spinlock.h"

#include <pthread.h>

#define WRAP_PAIRS 70000

static uint16_t owner_of(const spinlock_t *l) { return (uint16_t)READ_ONCE(l->val); }
static uint16_t next_of(const spinlock_t *l) { return (uint16_t)(READ_ONCE(l->val) >> TICKET_SHIFT); }

static void test_layout(void)
{
	spinlock_t l = SPINLOCK_INIT;

	CHECK_EQ(sizeof(spinlock_t), 4);
	CHECK_EQ(l.val, 0);
	CHECK(!spin_is_locked(&l));
	CHECK(!spin_is_contended(&l));

	/* lock takes ticket 0, which is being served: next = 1, owner = 0 */
	spin_lock(&l);
	CHECK_EQ(l.val, 1u << TICKET_SHIFT);
	CHECK_EQ(l.next, 1);
	CHECK_EQ(l.owner, 0);
	CHECK(spin_is_locked(&l));
	CHECK(!spin_is_contended(&l));

	/* trylock on a held lock fails and leaves the word alone */
	CHECK(!spin_trylock(&l));
	CHECK_EQ(l.val, 1u << TICKET_SHIFT);

	/* unlock serves the next ticket: owner = next = 1 */
	spin_unlock(&l);
	CHECK_EQ(l.val, (1u << TICKET_SHIFT) | 1);
	CHECK(!spin_is_locked(&l));

	/* trylock on a free lock takes the next ticket */
	CHECK(spin_trylock(&l));
	CHECK_EQ(l.val, (2u << TICKET_SHIFT) | 1);
	CHECK(spin_is_locked(&l));
	spin_unlock(&l);
	CHECK_EQ(l.val, (2u << TICKET_SHIFT) | 2);

	/* a waiter is visible as contention: next - owner == 2 */
	WRITE_ONCE(l.val, (4u << TICKET_SHIFT) | 2);
	CHECK(spin_is_locked(&l));
	CHECK(spin_is_contended(&l));

	spin_lock_init(&l);
	CHECK_EQ(l.val, 0);
}

/* Both halves wrap at 65536 and the lock keeps working; owner never carries
 * into next. */
static void test_wraparound(void)
{
	spinlock_t l = SPINLOCK_INIT;

	for (unsigned i = 0; i < WRAP_PAIRS; i++) {
		if (i & 1) {
			REQUIRE(spin_trylock(&l));
		} else {
			spin_lock(&l);
		}
		if (!spin_is_locked(&l) || next_of(&l) != (uint16_t)(i + 1)) {
			fprintf(stderr, "pair %u: word %#x while held\n", i, l.val);
			exit(1);
		}
		spin_unlock(&l);
		if (spin_is_locked(&l) || owner_of(&l) != (uint16_t)(i + 1)) {
			fprintf(stderr, "pair %u: word %#x after unlock\n", i, l.val);
			exit(1);
		}
	}
	CHECK_EQ(owner_of(&l), (uint16_t)WRAP_PAIRS);
	CHECK_EQ(next_of(&l), (uint16_t)WRAP_PAIRS);
	CHECK_EQ(l.val, ((uint32_t)(uint16_t)WRAP_PAIRS << TICKET_SHIFT) | (uint16_t)WRAP_PAIRS);

	/* right at the edge: owner = next = 0xffff, then both wrap to 0 */
	WRITE_ONCE(l.val, 0xffffffffu);
	CHECK(!spin_is_locked(&l));
	spin_lock(&l);
	CHECK_EQ(l.val, 0x0000ffffu);
	CHECK(spin_is_locked(&l));
	CHECK(!spin_trylock(&l));
	spin_unlock(&l);
	CHECK_EQ(l.val, 0);
	CHECK(!spin_is_locked(&l));
}

static spinlock_t handoff_lock = SPINLOCK_INIT;
static atomic_t waiter_in;
static int waiter_saw;          /* plain: written by the waiter under the lock */

static void *waiter(void *arg)
{
	spin_lock(&handoff_lock);
	waiter_saw = 1 + *(int *)arg;    /* plain: ordered by the lock */
	atomic_set_release(&waiter_in, 1);
	spin_unlock(&handoff_lock);
	return NULL;
}

/* A second thread waits (contended) and gets the lock on unlock, seeing the
 * write made under the first hold. */
static void test_handoff(void)
{
	static int value;
	pthread_t t;
	double deadline;

	spin_lock(&handoff_lock);
	REQUIRE(pthread_create(&t, NULL, waiter, &value) == 0);
	deadline = test_now() + 10;
	while (!spin_is_contended(&handoff_lock)) {
		REQUIRE(test_now() < deadline);
		sched_yield();
	}
	CHECK_EQ(next_of(&handoff_lock) - owner_of(&handoff_lock), 2);
	value = 41;
	CHECK_EQ(atomic_read(&waiter_in), 0);
	spin_unlock(&handoff_lock);
	pthread_join(t, NULL);
	CHECK_EQ(atomic_read_acquire(&waiter_in), 1);
	CHECK_EQ(waiter_saw, 42);
	CHECK(!spin_is_locked(&handoff_lock));
	CHECK_EQ(owner_of(&handoff_lock), 2);
}

int main(void)
{
	test_layout();
	test_wraparound();
	test_handoff();
	return test_done("atomic_spinlock_unit");
}
