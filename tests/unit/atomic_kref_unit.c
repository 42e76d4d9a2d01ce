/* atomic_kref_unit - single-threaded semantics of kref.h and kcref.h. */
#include "test.h"
#include "kcref.h"
#include "kref.h"
#include "spinlock.h"

#include <limits.h>

struct obj {
	struct kref ref;
	int released;
	spinlock_t *lock;          /* kref_put_lock: the lock release() must drop */
	bool lock_was_held;
};

#define to_obj(k) ((struct obj *)((char *)(k) - offsetof(struct obj, ref)))

static void obj_release(struct kref *k)
{
	to_obj(k)->released++;
}

static void obj_release_locked(struct kref *k)
{
	struct obj *o = to_obj(k);

	o->released++;
	o->lock_was_held = spin_is_locked(o->lock);
	spin_unlock(o->lock);
}

/* How many times the ticket lock has been taken since init (mod 2^16). */
static unsigned int tickets(const spinlock_t *l)
{
	return (uint16_t)(READ_ONCE(l->val) >> TICKET_SHIFT);
}

static void test_kref(void)
{
	struct obj o = { .ref = KREF_INIT(1) };

	CHECK_EQ(kref_read(&o.ref), 1);
	kref_init(&o.ref);
	CHECK_EQ(kref_read(&o.ref), 1);

	kref_get(&o.ref);
	CHECK_EQ(kref_read(&o.ref), 2);
	CHECK(kref_get_unless_zero(&o.ref));
	CHECK_EQ(kref_read(&o.ref), 3);

	CHECK_EQ(kref_put(&o.ref, obj_release), 0);
	CHECK_EQ(kref_put(&o.ref, obj_release), 0);
	CHECK_EQ(o.released, 0);
	CHECK_EQ(kref_read(&o.ref), 1);

	/* the last put releases, exactly once, and reports it */
	CHECK_EQ(kref_put(&o.ref, obj_release), 1);
	CHECK_EQ(o.released, 1);
	CHECK_EQ(kref_read(&o.ref), 0);

	/* a released kref cannot be revived by a lookup */
	CHECK(!kref_get_unless_zero(&o.ref));
	CHECK_EQ(kref_read(&o.ref), 0);
	CHECK_EQ(o.released, 1);

	/* re-init starts a new life */
	kref_init(&o.ref);
	CHECK(kref_get_unless_zero(&o.ref));
	CHECK_EQ(kref_put(&o.ref, obj_release), 0);
	CHECK_EQ(kref_put(&o.ref, obj_release), 1);
	CHECK_EQ(o.released, 2);

	/* large counts behave (no saturation logic, no sign trouble below INT_MAX) */
	atomic_set(&o.ref.refcount, INT_MAX - 1);
	kref_get(&o.ref);
	CHECK_EQ(kref_read(&o.ref), (unsigned int)INT_MAX);
	CHECK_EQ(kref_put(&o.ref, obj_release), 0);
	CHECK_EQ(kref_read(&o.ref), (unsigned int)INT_MAX - 1);
	CHECK_EQ(o.released, 2);
}

static void test_dec_and_lock(void)
{
	spinlock_t lock = SPINLOCK_INIT;
	atomic_t cnt = ATOMIC_INIT(3);

	/* above 1: fast path, the lock is never taken */
	CHECK(!atomic_dec_and_lock(&cnt, &lock));
	CHECK_EQ(atomic_read(&cnt), 2);
	CHECK(!atomic_dec_and_lock(&cnt, &lock));
	CHECK_EQ(atomic_read(&cnt), 1);
	CHECK_EQ(tickets(&lock), 0);
	CHECK(!spin_is_locked(&lock));

	/* 1 -> 0: taken under the lock, returned held */
	CHECK(atomic_dec_and_lock(&cnt, &lock));
	CHECK_EQ(atomic_read(&cnt), 0);
	CHECK(spin_is_locked(&lock));
	CHECK_EQ(tickets(&lock), 1);
	spin_unlock(&lock);
	CHECK(!spin_is_locked(&lock));

	/* the slow path that does not reach 0 (a lookup re-got the object
	 * between the fast path's look and the lock): lock taken and dropped */
	atomic_set(&cnt, 2);
	CHECK(!atomic_dec_and_lock_slow(&cnt, &lock));
	CHECK_EQ(atomic_read(&cnt), 1);
	CHECK(!spin_is_locked(&lock));
	CHECK_EQ(tickets(&lock), 2);
	CHECK(atomic_dec_and_lock_slow(&cnt, &lock));
	CHECK_EQ(atomic_read(&cnt), 0);
	CHECK(spin_is_locked(&lock));
	spin_unlock(&lock);

	/* a large count goes down by the fast path only */
	atomic_set(&cnt, INT_MAX);
	CHECK(!atomic_dec_and_lock(&cnt, &lock));
	CHECK_EQ(atomic_read(&cnt), INT_MAX - 1);
	CHECK_EQ(tickets(&lock), 3);
}

static void test_kref_put_lock(void)
{
	spinlock_t lock = SPINLOCK_INIT;
	struct obj o = { .ref = KREF_INIT(2), .lock = &lock };

	CHECK_EQ(kref_put_lock(&o.ref, obj_release_locked, &lock), 0);
	CHECK_EQ(o.released, 0);
	CHECK(!spin_is_locked(&lock));
	CHECK_EQ(kref_read(&o.ref), 1);

	CHECK_EQ(kref_put_lock(&o.ref, obj_release_locked, &lock), 1);
	CHECK_EQ(o.released, 1);
	CHECK(o.lock_was_held);
	CHECK(!spin_is_locked(&lock));       /* release() dropped it */
	CHECK_EQ(kref_read(&o.ref), 0);
}

int main(void)
{
	test_kref();
	test_dec_and_lock();
	test_kref_put_lock();
	return test_done("atomic_kref_unit");
}
