/*
 * atomic_biased_stress - users take and drop uses of a "segment" with
 * biased_try_get / biased_dec_return while a releaser repeatedly tries to
 * flag it as being released (biased_try_set_flag), tears down and rebuilds
 * its contents, and clears the flag. An observer reads the word.
 *
 * Checked:
 *   - every single read of the word (one atomic load) is either the flag with
 *     a zero count or a count without the flag: never flag + count;
 *   - no try_get succeeds during the released phase: a user holding a use
 *     never sees the releaser's "released" marker, and always finds the
 *     segment's contents whole and of one generation (plain memory: TSan
 *     checks the try_get/clear_flag and dec/set_flag pairings);
 *   - set_flag succeeds only with the count at 0;
 *   - at the end the word is 0.
 */
#include "test.h"
#include "biased.h"

#include <pthread.h>

#define USERS 2
#define WORDS 16

static struct biased seg_use = BIASED_INIT;
static struct {
	int released;                  /* plain: 1 only while flagged */
	unsigned long gen;
	unsigned long data[WORDS];
} seg;                                 /* plain memory guarded by seg_use */

static atomic_t stop;
static atomic_long_t gets_ok, gets_refused, flags_set, flags_refused;
static atomic_long_t seen_flagged, seen_counted;

static unsigned long word_of(unsigned long gen, int i)
{
	return (gen * 0x9E3779B97F4A7C15ul) + (unsigned long)i;
}

static void *user(void *arg)
{
	uint64_t seed = 0x51ed5eedull * ((uintptr_t)arg + 1);

	while (!atomic_read(&stop)) {
		if (!biased_try_get(&seg_use)) {
			atomic_long_inc(&gets_refused);
			cpu_relax();
			continue;
		}
		atomic_long_inc(&gets_ok);
		REQUIRE(seg.released == 0);
		unsigned long g = seg.gen;
		for (int i = 0; i < WORDS; i++)
			REQUIRE(seg.data[i] == word_of(g, i));
		/* a nested use by the holder: the raw increment is allowed */
		if (test_rand(&seed) % 4 == 0) {
			REQUIRE(biased_inc_return(&seg_use) >= 2);
			REQUIRE(biased_dec_return(&seg_use) >= 1);
		}
		REQUIRE(biased_dec_return(&seg_use) >= 0);
		/* leave gaps so the count can reach 0 */
		for (unsigned int n = test_rand(&seed) % 64; n; n--)
			cpu_relax();
	}
	return NULL;
}

static void *releaser(void *arg)
{
	uint64_t seed = 0x7e1ea5edull;

	while (!atomic_read(&stop)) {
		if (!biased_try_set_flag(&seg_use)) {
			atomic_long_inc(&flags_refused);
			cpu_relax();
			continue;
		}
		atomic_long_inc(&flags_set);
		unsigned int w = biased_read(&seg_use);
		REQUIRE(biased_word_flag(w) && biased_word_count(w) == 0);
		seg.released = 1;
		for (int i = 0; i < WORDS; i++)          /* teardown */
			seg.data[i] = 0xdeadbeef;
		for (int k = 0; k < 8; k++) {            /* nobody gets in meanwhile */
			REQUIRE(!biased_try_get(&seg_use));
			cpu_relax();
		}
		seg.gen++;
		for (int i = 0; i < WORDS; i++)          /* rebuild */
			seg.data[i] = word_of(seg.gen, i);
		seg.released = 0;
		biased_clear_flag(&seg_use);
		/* let users in for a while */
		for (unsigned int n = test_rand(&seed) % 1024; n; n--)
			cpu_relax();
	}
	return NULL;
}

static void *observer(void *arg)
{
	while (!atomic_read(&stop)) {
		unsigned int w = biased_read(&seg_use);   /* one atomic read */

		if (biased_word_flag(w)) {
			if (biased_word_count(w) != 0) {
				fprintf(stderr, "observer: flag set with count %u (word %#x)\n",
					biased_word_count(w), w);
				exit(1);
			}
			atomic_long_inc(&seen_flagged);
		} else if (biased_word_count(w)) {
			atomic_long_inc(&seen_counted);
		}
	}
	return NULL;
}

int main(void)
{
	pthread_t u[USERS], rel, obs;

	for (int i = 0; i < WORDS; i++)
		seg.data[i] = word_of(0, i);
	for (int t = 0; t < USERS; t++)
		REQUIRE(pthread_create(&u[t], NULL, user, (void *)(intptr_t)t) == 0);
	REQUIRE(pthread_create(&rel, NULL, releaser, NULL) == 0);
	REQUIRE(pthread_create(&obs, NULL, observer, NULL) == 0);

	test_sleep_ms((long)(test_stress_seconds(1.5) * 1000));
	atomic_set(&stop, 1);
	for (int t = 0; t < USERS; t++)
		pthread_join(u[t], NULL);
	pthread_join(rel, NULL);
	pthread_join(obs, NULL);

	CHECK_EQ(biased_read(&seg_use), 0);
	CHECK_EQ(seg.released, 0);
	printf("gets %ld (refused %ld), flag set %ld (refused %ld), observer saw "
	       "flag %ld / counted %ld\n", atomic_long_read(&gets_ok),
	       atomic_long_read(&gets_refused), atomic_long_read(&flags_set),
	       atomic_long_read(&flags_refused), atomic_long_read(&seen_flagged),
	       atomic_long_read(&seen_counted));
	CHECK(atomic_long_read(&gets_ok) > 0);
	CHECK(atomic_long_read(&flags_set) > 0);
	return test_done("atomic_biased_stress");
}
