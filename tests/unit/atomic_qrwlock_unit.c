/*
 * atomic_qrwlock_unit - the queued rwlock's word after each operation.
 *
 * Single-threaded: readers count in units of QRW_BIAS (256), a writer is the
 * byte 0xff, each trylock fails against the other side and leaves the word
 * alone, 70000 read and write pairs leave no residue. Then a scripted
 * sequence with helper threads:
 *
 *   main read-holds                          0x100
 *   W write_lock: waits, WAITING set         0x101  (W holds wait_lock)
 *   main read_trylock fails, word unchanged  0x101
 *   R read_lock: backs off, queues           0x101  (wait_lock contended)
 *   main read_unlock: W gets it              0x0ff, then R adds its bias
 *                                            0x1ff  (R waits for W)
 *   W write_unlock: R gets it                0x100
 *   R read_unlock                            0x000
 *
 * so a reader arriving behind a waiting writer does not overtake it.
 */
#include "test.h"
#include "qrwlock.h"

#include <pthread.h>
#include <unistd.h>

#define PAIRS 70000

static qrwlock_t lock = QRWLOCK_INIT;
static atomic_t seq;
static long shared_value;             /* plain: written only under the write lock */

struct helper {
	pthread_t tid;
	bool writer;
	atomic_t started, order, go;
	long saw;
};

static uint32_t word(void) { return (uint32_t)atomic_read(&lock.cnts); }

static void *helper_main(void *arg)
{
	struct helper *h = arg;

	atomic_set_release(&h->started, 1);
	if (h->writer) {
		qrw_write_lock(&lock);
		REQUIRE(READ_ONCE(lock.wlocked) == QRW_LOCKED);
		h->saw = shared_value;
		shared_value = 7;
	} else {
		qrw_read_lock(&lock);
		REQUIRE((word() & QRW_WMASK) == 0);
		h->saw = shared_value;
	}
	atomic_set_release(&h->order, atomic_inc_return(&seq));
	while (!atomic_read_acquire(&h->go))
		sched_yield();
	if (h->writer)
		qrw_write_unlock(&lock);
	else
		qrw_read_unlock(&lock);
	return NULL;
}

static void wait_until(bool (*cond)(void), const char *what)
{
	double deadline = test_now() + 10;

	while (!cond()) {
		if (test_now() > deadline) {
			fprintf(stderr, "timed out waiting for %s (word %#x)\n", what, word());
			exit(1);
		}
		sched_yield();
	}
}

static void start(struct helper *h, bool writer)
{
	h->writer = writer;
	REQUIRE(pthread_create(&h->tid, NULL, helper_main, h) == 0);
	while (!atomic_read_acquire(&h->started))
		sched_yield();
}

static void test_single_thread(void)
{
	qrwlock_t l;

	CHECK_EQ(sizeof(qrwlock_t), 8);
	CHECK_EQ(QRW_BIAS, 256);
	qrwlock_init(&l);
	CHECK_EQ(atomic_read(&l.cnts), 0);
	CHECK(!qrwlock_is_locked(&l));
	CHECK(!spin_is_locked(&l.wait_lock));

	/* readers: one bias each, no writer byte */
	qrw_read_lock(&l);
	CHECK_EQ(atomic_read(&l.cnts), QRW_BIAS);
	CHECK(qrwlock_is_locked(&l));
	qrw_read_lock(&l);
	qrw_read_lock(&l);
	CHECK_EQ(atomic_read(&l.cnts), 3 * QRW_BIAS);
	CHECK(qrw_read_trylock(&l));
	CHECK_EQ(atomic_read(&l.cnts), 4 * QRW_BIAS);
	CHECK_EQ(l.wlocked, 0);

	/* a writer cannot get in while anyone reads; the word is unchanged */
	CHECK(!qrw_write_trylock(&l));
	CHECK_EQ(atomic_read(&l.cnts), 4 * QRW_BIAS);
	for (int i = 4; i > 1; i--)
		qrw_read_unlock(&l);
	CHECK_EQ(atomic_read(&l.cnts), QRW_BIAS);
	CHECK(!qrw_write_trylock(&l));
	qrw_read_unlock(&l);
	CHECK_EQ(atomic_read(&l.cnts), 0);
	CHECK(!qrwlock_is_locked(&l));

	/* a writer is the byte 0xff; readers and writers fail against it */
	qrw_write_lock(&l);
	CHECK_EQ(atomic_read(&l.cnts), QRW_LOCKED);
	CHECK_EQ(l.wlocked, 0xff);
	CHECK(qrwlock_is_locked(&l));
	CHECK(!qrw_read_trylock(&l));
	CHECK_EQ(atomic_read(&l.cnts), QRW_LOCKED);
	CHECK(!qrw_write_trylock(&l));
	CHECK_EQ(atomic_read(&l.cnts), QRW_LOCKED);
	qrw_write_unlock(&l);
	CHECK_EQ(atomic_read(&l.cnts), 0);

	CHECK(qrw_write_trylock(&l));
	CHECK_EQ(atomic_read(&l.cnts), QRW_LOCKED);
	qrw_write_unlock(&l);
	CHECK_EQ(atomic_read(&l.cnts), 0);

	/* a waiting writer (byte 0x01) keeps read_trylock and write_trylock out */
	atomic_set(&l.cnts, QRW_WAITING);
	CHECK(qrwlock_is_locked(&l));
	CHECK(!qrw_read_trylock(&l));
	CHECK_EQ(atomic_read(&l.cnts), QRW_WAITING);
	CHECK(!qrw_write_trylock(&l));
	CHECK_EQ(atomic_read(&l.cnts), QRW_WAITING);
	qrwlock_init(&l);

	for (unsigned i = 0; i < PAIRS; i++) {
		bool ok = true;

		switch (i % 4) {
		case 0: qrw_read_lock(&l); ok = atomic_read(&l.cnts) == (int)QRW_BIAS; qrw_read_unlock(&l); break;
		case 1: ok = qrw_read_trylock(&l) && atomic_read(&l.cnts) == (int)QRW_BIAS; qrw_read_unlock(&l); break;
		case 2: qrw_write_lock(&l); ok = atomic_read(&l.cnts) == (int)QRW_LOCKED; qrw_write_unlock(&l); break;
		case 3: ok = qrw_write_trylock(&l) && atomic_read(&l.cnts) == (int)QRW_LOCKED; qrw_write_unlock(&l); break;
		}
		if (!ok || atomic_read(&l.cnts) != 0 || spin_is_locked(&l.wait_lock)) {
			fprintf(stderr, "pair %u (kind %u): word %#x\n", i, i % 4, atomic_read(&l.cnts));
			exit(1);
		}
	}
}

static bool writer_waiting(void) { return word() == (QRW_BIAS | QRW_WAITING); }
static bool queue_contended(void) { return spin_is_contended(&lock.wait_lock); }
static bool reader_behind_writer(void) { return word() == (QRW_BIAS | QRW_LOCKED); }
static bool lock_free(void) { return word() == 0; }

static void test_writer_not_overtaken(void)
{
	struct helper w = { 0 }, r = { 0 };

	qrw_read_lock(&lock);
	shared_value = 1;       /* W reads it after our read_unlock (release) */
	start(&w, true);
	wait_until(writer_waiting, "W to set WAITING beside our reader bias");
	CHECK(spin_is_locked(&lock.wait_lock));

	/* the waiting writer keeps new readers out */
	CHECK(!qrw_read_trylock(&lock));
	CHECK_EQ(word(), QRW_BIAS | QRW_WAITING);

	start(&r, false);
	wait_until(queue_contended, "R to queue on wait_lock behind W");
	CHECK_EQ(word(), QRW_BIAS | QRW_WAITING);   /* R took its bias back */
	usleep(2000);
	CHECK_EQ(atomic_read(&seq), 0);

	/* last reader leaves: W gets the lock, then R adds its bias and waits */
	qrw_read_unlock(&lock);
	wait_until(reader_behind_writer, "W to hold the lock with R's bias waiting");
	{
		double deadline = test_now() + 10;

		while (!atomic_read_acquire(&w.order)) {
			REQUIRE(test_now() < deadline);
			sched_yield();
		}
	}
	CHECK_EQ(atomic_read(&w.order), 1);
	CHECK_EQ(w.saw, 1);
	CHECK(spin_is_locked(&lock.wait_lock));     /* R waits holding the queue */
	CHECK(!qrw_read_trylock(&lock));
	CHECK(!qrw_write_trylock(&lock));
	usleep(2000);
	CHECK_EQ(atomic_read(&r.order), 0);
	CHECK_EQ(word(), QRW_BIAS | QRW_LOCKED);

	/* W leaves: R is in */
	atomic_set_release(&w.go, 1);
	pthread_join(w.tid, NULL);
	{
		double deadline = test_now() + 10;

		while (!atomic_read_acquire(&r.order)) {
			REQUIRE(test_now() < deadline);
			sched_yield();
		}
	}
	CHECK_EQ(atomic_read(&r.order), 2);
	CHECK_EQ(r.saw, 7);
	CHECK_EQ(word(), QRW_BIAS);
	CHECK(!spin_is_locked(&lock.wait_lock));
	CHECK(!qrw_write_trylock(&lock));
	/* a reader joins a reader even with the slow path just used */
	CHECK(qrw_read_trylock(&lock));
	CHECK_EQ(word(), 2 * QRW_BIAS);
	qrw_read_unlock(&lock);

	atomic_set_release(&r.go, 1);
	pthread_join(r.tid, NULL);
	wait_until(lock_free, "the lock to be free");
	CHECK(!qrwlock_is_locked(&lock));
}

int main(void)
{
	test_single_thread();
	test_writer_not_overtaken();
	return test_done("atomic_qrwlock_unit");
}
