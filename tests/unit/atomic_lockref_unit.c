/* atomic_lockref_unit - layout and single-threaded semantics of lockref.h,
 * plus the fallback to the lock while another thread holds it. */
#include "test.h"
#include "lockref.h"

#include <pthread.h>
#include <unistd.h>

static uint32_t lock_half(const struct lockref *lr)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return (uint32_t)lr->lock_count;
#else
	return (uint32_t)(lr->lock_count >> 32);
#endif
}

static int32_t count_half(const struct lockref *lr)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return (int32_t)(uint32_t)(lr->lock_count >> 32);
#else
	return (int32_t)(uint32_t)lr->lock_count;
#endif
}

static void test_layout(void)
{
	struct lockref lr = LOCKREF_INIT(5);

	CHECK_EQ(count_half(&lr), 5);
	CHECK_EQ(lock_half(&lr), 0);
	CHECK_EQ(lr.count, 5);
	CHECK_EQ(lr.lock.val, 0);

	/* taking the lock touches only the lock half: next = 1, owner = 0 */
	lockref_lock(&lr);
	CHECK_EQ(lock_half(&lr), 1u << TICKET_SHIFT);
	CHECK_EQ(count_half(&lr), 5);
	CHECK(spin_is_locked(&lr.lock));

	/* a locked count update touches only the count half */
	__lockref_add(&lr, 2);
	CHECK_EQ(count_half(&lr), 7);
	CHECK_EQ(lock_half(&lr), 1u << TICKET_SHIFT);

	/* dead count is negative in the count half, lock half untouched */
	lockref_mark_dead(&lr);
	CHECK_EQ(count_half(&lr), LOCKREF_DEAD);
	CHECK_EQ(lock_half(&lr), 1u << TICKET_SHIFT);
	CHECK(__lockref_is_dead(&lr));
	lockref_unlock(&lr);
	CHECK_EQ(lock_half(&lr), (1u << TICKET_SHIFT) | 1);
	CHECK(!spin_is_locked(&lr.lock));

	/* init resets both halves; all-ones count stays out of the lock half */
	lockref_init(&lr, -1);
	CHECK_EQ(count_half(&lr), -1);
	CHECK_EQ(lock_half(&lr), 0);
	CHECK_EQ(lockref_read_count(&lr), -1);
}

static void test_verbs(void)
{
	struct lockref lr;

	lockref_init(&lr, 5);
	lockref_get(&lr);
	CHECK_EQ(lr.count, 6);
	CHECK(lockref_get_not_zero(&lr));
	CHECK_EQ(lr.count, 7);
	CHECK(lockref_get_not_dead(&lr));
	CHECK_EQ(lr.count, 8);
	CHECK_EQ(lockref_put_return(&lr), 7);
	CHECK(lockref_put_or_lock(&lr));
	CHECK_EQ(lr.count, 6);
	CHECK(!spin_is_locked(&lr.lock));
	/* none of the lockless verbs took the lock */
	CHECK_EQ(lr.lock.val, 0);

	/* zero: not revivable by get_not_zero, revivable by get_not_dead */
	lockref_init(&lr, 0);
	CHECK(!lockref_get_not_zero(&lr));
	CHECK_EQ(lr.count, 0);
	CHECK(lockref_get_not_dead(&lr));
	CHECK_EQ(lr.count, 1);

	/* put_return down to 0, then refuses */
	CHECK_EQ(lockref_put_return(&lr), 0);
	CHECK_EQ(lr.count, 0);
	CHECK_EQ(lockref_put_return(&lr), -1);
	CHECK_EQ(lr.count, 0);

	/* put_or_lock at count 1 (and 0): no change, lock returned held */
	lockref_init(&lr, 1);
	CHECK(!lockref_put_or_lock(&lr));
	CHECK(spin_is_locked(&lr.lock));
	CHECK_EQ(lr.count, 1);
	__lockref_add(&lr, -1);                  /* the last holder's own put */
	lockref_unlock(&lr);
	CHECK_EQ(lr.count, 0);
	CHECK(!lockref_put_or_lock(&lr));
	CHECK(spin_is_locked(&lr.lock));
	CHECK_EQ(lr.count, 0);
	lockref_unlock(&lr);

	/* put_or_lock at 2 goes lockless to 1 */
	lockref_init(&lr, 2);
	CHECK(lockref_put_or_lock(&lr));
	CHECK_EQ(lr.count, 1);
	CHECK_EQ(lr.lock.val, 0);

	/* put_return while locked: -1 at once, no change, no wait */
	lockref_init(&lr, 3);
	lockref_lock(&lr);
	CHECK_EQ(lockref_put_return(&lr), -1);
	CHECK_EQ(lr.count, 3);
	lockref_unlock(&lr);
	CHECK_EQ(lockref_put_return(&lr), 2);

	/* edge: large count */
	lockref_init(&lr, INT32_MAX - 1);
	lockref_get(&lr);
	CHECK_EQ(lr.count, INT32_MAX);
	CHECK_EQ(lockref_put_return(&lr), INT32_MAX - 1);
}

static void test_dead(void)
{
	struct lockref lr = LOCKREF_INIT(3);

	lockref_lock(&lr);
	lockref_mark_dead(&lr);
	lockref_unlock(&lr);
	CHECK_EQ(lockref_read_count(&lr), LOCKREF_DEAD);

	CHECK(!lockref_get_not_dead(&lr));
	CHECK(!lockref_get_not_zero(&lr));
	CHECK_EQ(lockref_put_return(&lr), -1);
	CHECK_EQ(lr.count, LOCKREF_DEAD);
	CHECK(!spin_is_locked(&lr.lock));
	/* put_or_lock on a dead lockref hands the lock to the caller */
	CHECK(!lockref_put_or_lock(&lr));
	CHECK(spin_is_locked(&lr.lock));
	CHECK(__lockref_is_dead(&lr));
	lockref_unlock(&lr);
}

/* ---- fallback: a verb run while another thread holds the lock ---------- */

enum op { OP_GET, OP_GET_NOT_ZERO, OP_GET_NOT_DEAD, OP_PUT_OR_LOCK };

struct helper {
	struct lockref *lr;
	enum op op;
	atomic_t done;
	bool result;
};

static void *helper_main(void *arg)
{
	struct helper *h = arg;
	bool r = true;

	switch (h->op) {
	case OP_GET:          lockref_get(h->lr); break;
	case OP_GET_NOT_ZERO: r = lockref_get_not_zero(h->lr); break;
	case OP_GET_NOT_DEAD: r = lockref_get_not_dead(h->lr); break;
	case OP_PUT_OR_LOCK:
		r = lockref_put_or_lock(h->lr);
		if (!r)
			lockref_unlock(h->lr);
		break;
	}
	h->result = r;
	atomic_set_release(&h->done, 1);
	return NULL;
}

/*
 * Hold the lock, start a helper running op, wait until it queues on the lock
 * (the ticket lock shows a waiter), check it has not completed and the count
 * has not moved, change the count under the lock to start, release, and check
 * the helper's result and the final count.
 */
static void fallback_case(enum op op, int32_t start, bool want, int32_t want_count)
{
	struct lockref lr = LOCKREF_INIT(1000);
	struct helper h = { .lr = &lr, .op = op };
	pthread_t t;
	double deadline;

	lockref_lock(&lr);
	REQUIRE(pthread_create(&t, NULL, helper_main, &h) == 0);
	deadline = test_now() + 5;
	while (!spin_is_contended(&lr.lock) && test_now() < deadline)
		usleep(100);
	CHECK(spin_is_contended(&lr.lock));      /* the helper fell back to the lock */
	usleep(2000);
	CHECK_EQ(atomic_read_acquire(&h.done), 0);
	CHECK_EQ(lockref_read_count(&lr), 1000); /* no lockless change slipped in */
	__lockref_add(&lr, start - 1000);
	lockref_unlock(&lr);
	REQUIRE(pthread_join(t, NULL) == 0);
	CHECK_EQ(atomic_read(&h.done), 1);
	CHECK_EQ(h.result, want);
	CHECK_EQ(lockref_read_count(&lr), want_count);
	CHECK(!spin_is_locked(&lr.lock));
}

static void test_fallback(void)
{
	fallback_case(OP_GET, 4, true, 5);
	fallback_case(OP_GET_NOT_ZERO, 4, true, 5);
	fallback_case(OP_GET_NOT_ZERO, 0, false, 0);
	fallback_case(OP_GET_NOT_DEAD, 0, true, 1);
	fallback_case(OP_GET_NOT_DEAD, LOCKREF_DEAD, false, LOCKREF_DEAD);
	fallback_case(OP_PUT_OR_LOCK, 4, true, 3);
	fallback_case(OP_PUT_OR_LOCK, 1, false, 1);
}

int main(void)
{
	test_layout();
	test_verbs();
	test_dead();
	test_fallback();
	return test_done("atomic_lockref_unit");
}
