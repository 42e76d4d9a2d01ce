/*
 * atomic_qrwlock_stress - readers and writers hammer one queued rwlock.
 *
 * Writers (2) set a plain pair (a, b = a * K) with a gap between the two
 * stores, inside the write lock; readers (4) read the pair with a gap and
 * require b == a * K. Both sides keep inside counters and check:
 *   - a writer is alone: writers_inside reads 1 and readers_inside 0;
 *   - a reader never sees a writer inside, before or after reading the pair;
 *   - readers do share the lock (two readers were seen inside at once);
 *   - the pair a writer finds is the one the previous writer left (a counts
 *     all write sections).
 * Writer progress: the readers keep hammering (back to back, some with
 * read_trylock) until every writer has completed WRITER_MIN sections; if a
 * writer has not by HARD_LIMIT seconds, it was starved and the test fails.
 * Duration: USLAB_STRESS_SECONDS (default 2 s), at most HARD_LIMIT.
 */
#include "test.h"
#include "qrwlock.h"

#include <pthread.h>
#include <unistd.h>

#define K 0x9E3779B97F4A7C15ul
#define NREADERS 4
#define NWRITERS 2
#define WRITER_MIN 200
#define HARD_LIMIT 8.0

static qrwlock_t lock = QRWLOCK_INIT;
static unsigned long pair_a, pair_b;      /* plain: written only under the write lock */
static atomic_t readers_inside, writers_inside, max_readers_inside;
static atomic_t stop_writers, stop_readers;
static atomic_long_t read_trylocks_ok, write_trylocks_ok;

struct thread {
	pthread_t tid;
	int id;
	uint64_t seed;
	atomic_long_t sections;
};

static void gap(int n)
{
	for (int i = 0; i < n; i++)
		cpu_relax();
}

static void *writer_main(void *arg)
{
	struct thread *t = arg;

	while (!atomic_read(&stop_writers)) {
		unsigned long a;

		if ((test_rand(&t->seed) & 3) == 0 && qrw_write_trylock(&lock))
			atomic_long_inc(&write_trylocks_ok);
		else
			qrw_write_lock(&lock);
		REQUIRE(READ_ONCE(lock.wlocked) == QRW_LOCKED);
		if (atomic_inc_return(&writers_inside) != 1 || atomic_read(&readers_inside)) {
			fprintf(stderr, "writer %d not alone: %d writers, %d readers inside\n",
				t->id, atomic_read(&writers_inside), atomic_read(&readers_inside));
			exit(1);
		}
		a = pair_a;
		if (pair_b != a * K) {
			fprintf(stderr, "writer %d found a torn pair (%lu, %#lx)\n", t->id, a, pair_b);
			exit(1);
		}
		pair_a = a + 1;
		gap(16);
		pair_b = (a + 1) * K;
		REQUIRE(atomic_read(&readers_inside) == 0);
		atomic_dec(&writers_inside);
		qrw_write_unlock(&lock);
		atomic_long_inc(&t->sections);
		gap(64);        /* let the readers back in between writes */
	}
	return NULL;
}

static void *reader_main(void *arg)
{
	struct thread *t = arg;

	while (!atomic_read(&stop_readers)) {
		unsigned long a, b;
		int n, max;

		if ((test_rand(&t->seed) & 3) == 0) {
			if (!qrw_read_trylock(&lock))
				continue;
			atomic_long_inc(&read_trylocks_ok);
		} else {
			qrw_read_lock(&lock);
		}
		n = atomic_inc_return(&readers_inside);
		max = atomic_read(&max_readers_inside);
		while (n > max && !atomic_try_cmpxchg_relaxed(&max_readers_inside, &max, n))
			;
		if (atomic_read(&writers_inside) || (READ_ONCE(lock.wlocked) == QRW_LOCKED)) {
			fprintf(stderr, "reader %d sees a writer inside\n", t->id);
			exit(1);
		}
		a = pair_a;
		gap(16);
		b = pair_b;
		if (b != a * K) {
			fprintf(stderr, "reader %d read a torn pair (%lu, %#lx)\n", t->id, a, b);
			exit(1);
		}
		REQUIRE(atomic_read(&writers_inside) == 0);
		atomic_dec(&readers_inside);
		qrw_read_unlock(&lock);
		atomic_long_inc(&t->sections);
	}
	return NULL;
}

static bool writers_done(struct thread *w)
{
	for (int i = 0; i < NWRITERS; i++)
		if (atomic_long_read(&w[i].sections) < WRITER_MIN)
			return false;
	return true;
}

int main(void)
{
	struct thread r[NREADERS] = { 0 }, w[NWRITERS] = { 0 };
	double secs = test_stress_seconds(2.0), start, now;
	long reads = 0, writes = 0;

	if (secs > HARD_LIMIT)
		secs = HARD_LIMIT;
	for (int i = 0; i < NREADERS; i++) {
		r[i].id = i;
		r[i].seed = 0xabcdef01ull * (i + 1);
		REQUIRE(pthread_create(&r[i].tid, NULL, reader_main, &r[i]) == 0);
	}
	for (int i = 0; i < NWRITERS; i++) {
		w[i].id = i;
		w[i].seed = 0x5eed5eedull * (i + 1);
		REQUIRE(pthread_create(&w[i].tid, NULL, writer_main, &w[i]) == 0);
	}

	start = test_now();
	do {
		usleep(10000);
		now = test_now();
	} while (now - start < HARD_LIMIT && (now - start < secs || !writers_done(w)));

	/* Writers must have got through while the readers were still running. */
	for (int i = 0; i < NWRITERS; i++) {
		long n = atomic_long_read(&w[i].sections);

		if (n < WRITER_MIN) {
			fprintf(stderr, "writer %d starved: %ld write sections in %.1f s "
				"(want %d) against %d readers\n", i, n, now - start,
				WRITER_MIN, NREADERS);
			test_failures++;
		}
	}
	/* stop the readers too: a starved writer only gets in once they leave */
	atomic_set(&stop_writers, 1);
	atomic_set(&stop_readers, 1);
	for (int i = 0; i < NWRITERS; i++) {
		pthread_join(w[i].tid, NULL);
		writes += atomic_long_read(&w[i].sections);
	}
	for (int i = 0; i < NREADERS; i++) {
		pthread_join(r[i].tid, NULL);
		reads += atomic_long_read(&r[i].sections);
	}

	CHECK_EQ(pair_a, writes);
	CHECK_EQ(pair_b, writes * K);
	CHECK_EQ(atomic_read(&lock.cnts), 0);
	CHECK(!spin_is_locked(&lock.wait_lock));
	CHECK_EQ(atomic_read(&readers_inside), 0);
	CHECK_EQ(atomic_read(&writers_inside), 0);
	CHECK(atomic_read(&max_readers_inside) >= 2);
	printf("%ld read sections (%ld by trylock), %ld write sections (%ld by trylock), "
	       "up to %d readers inside at once, %.1f s\n", reads,
	       atomic_long_read(&read_trylocks_ok), writes,
	       atomic_long_read(&write_trylocks_ok), atomic_read(&max_readers_inside),
	       now - start);
	return test_done("atomic_qrwlock_stress");
}
