/*
 * atomic_mutex_unit - the mutex's word after each operation (0 free, 1
 * locked, 2 locked with a sleeper), trylock on a held lock, a waiter that
 * sleeps and is woken by unlock (the word reads 2 while it sleeps), and the
 * fork-child reset.
 */
#include "test.h"
#include "mutex.h"

#include <pthread.h>

static void test_word(void)
{
	mutex_t m = MUTEX_INIT;

	CHECK_EQ(sizeof(mutex_t), 4);
	CHECK_EQ(m.val, 0);
	CHECK(!mutex_is_locked(&m));
	mutex_lock(&m);
	CHECK_EQ(m.val, 1);   /* uncontended: nobody to wake */
	CHECK(mutex_is_locked(&m));
	CHECK(!mutex_trylock(&m));   /* a held lock: refused, word unchanged */
	CHECK_EQ(m.val, 1);
	mutex_unlock(&m);
	CHECK_EQ(m.val, 0);
	CHECK(mutex_trylock(&m));
	CHECK_EQ(m.val, 1);
	mutex_unlock_fork(&m, false);   /* the parent: a plain unlock */
	CHECK_EQ(m.val, 0);
	mutex_lock(&m);
	mutex_unlock_fork(&m, true);    /* the child: reset, holder or not */
	CHECK_EQ(m.val, 0);
}

static mutex_t held = MUTEX_INIT;
static atomic_t waiter_in;

static void *waiter(void *arg)
{
	(void)arg;
	mutex_lock(&held);   /* spins, then sleeps until main unlocks */
	atomic_set(&waiter_in, 1);
	mutex_unlock(&held);
	return NULL;
}

static void test_sleeper(void)
{
	pthread_t t;
	double start;

	mutex_lock(&held);
	REQUIRE(pthread_create(&t, NULL, waiter, NULL) == 0);
	/* the waiter gives up spinning and marks the word: 2 = wake me */
	start = test_now();
	while (READ_ONCE(held.val) != 2 && test_now() - start < 10)
		test_sleep_ms(1);
	CHECK_EQ(READ_ONCE(held.val), 2);
	test_sleep_ms(20);
	CHECK_EQ(atomic_read(&waiter_in), 0);   /* still shut out */
	mutex_unlock(&held);                    /* 2: wakes it */
	pthread_join(t, NULL);
	CHECK_EQ(atomic_read(&waiter_in), 1);
	CHECK_EQ(held.val, 0);
}

int main(void)
{
	test_word();
	test_sleeper();
	return test_done("atomic_mutex_unit");
}
