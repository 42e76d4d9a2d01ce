/*
 * atomic_mailbox_stress - posters send items to one owner's mailbox while the
 * owner takes them, and now and then closes the box, empties it, holds it
 * closed and reopens it (a thread exiting and its heap being recycled). The
 * owner hands every item back to its poster through a second mailbox that is
 * never closed (uslab's message returns).
 *
 * Checked:
 *   - every item the owner takes carries the payload its poster wrote before
 *     posting it (plain memory: TSan checks the post/take pairing);
 *   - an item is taken once per successful post: its state goes
 *     posted -> taken exactly once, and the totals match at the end;
 *   - a refused post (closed box) leaves the item with its poster, and while
 *     the owner holds the box closed its word stays exactly the flag;
 *   - at the end every item is back with its poster: none lost, none twice.
 */
#include "test.h"
#include "mailbox.h"

#include <pthread.h>

#define POSTERS 2
#define ITEMS   64

struct item {
	struct mailbox_node node;   /* first: linked through it */
	int poster;
	int idx;
	unsigned long gen;
	unsigned long payload[4];
	atomic_t state;             /* 0 with its poster, 1 posted */
};

static struct item items[POSTERS][ITEMS];
static struct mailbox box = MAILBOX_INIT;
static struct mailbox returns[POSTERS];
static atomic_t stop;
static atomic_long_t posted, refused, taken;
static int left_with[POSTERS];

static unsigned long payload_of(const struct item *it, int i)
{
	return (it->gen * 0x9E3779B97F4A7C15ul) ^ ((unsigned long)it->poster << 40) ^
	       ((unsigned long)it->idx << 20) ^ (unsigned long)i;
}

static void *poster(void *arg)
{
	int me = (int)(intptr_t)arg;
	struct item *mine[ITEMS];
	int n = 0;

	for (int i = 0; i < ITEMS; i++)
		mine[n++] = &items[me][i];
	while (!atomic_read(&stop)) {
		if (n == 0) {
			for (struct mailbox_node *m = mailbox_take(&returns[me]), *next; m; m = next) {
				next = m->next;
				mine[n++] = (struct item *)m;
			}
			if (n == 0) {
				cpu_relax();
				continue;
			}
		}
		struct item *it = mine[--n];
		it->gen++;
		for (int i = 0; i < 4; i++)
			it->payload[i] = payload_of(it, i);
		REQUIRE(atomic_xchg(&it->state, 1) == 0);
		if (mailbox_post(&box, &it->node)) {
			atomic_long_inc(&posted);
		} else {
			atomic_long_inc(&refused);
			REQUIRE(atomic_xchg(&it->state, 0) == 1);
			mine[n++] = it;
		}
	}
	/* what is back already, plus what this thread holds */
	for (struct mailbox_node *m = mailbox_take(&returns[me]), *next; m; m = next) {
		next = m->next;
		mine[n++] = (struct item *)m;
	}
	left_with[me] = n;
	return NULL;
}

static void owner_process(struct mailbox_node *m)
{
	for (struct mailbox_node *next; m; m = next) {
		struct item *it = (struct item *)m;

		next = m->next;   /* before the post below rewrites it */
		for (int i = 0; i < 4; i++)
			REQUIRE(it->payload[i] == payload_of(it, i));
		REQUIRE(atomic_xchg(&it->state, 0) == 1);
		atomic_long_inc(&taken);
		REQUIRE(mailbox_post(&returns[it->poster], m));
	}
}

int main(void)
{
	pthread_t t[POSTERS];
	uint64_t seed = 0x6d61696cull;
	long closes = 0;

	for (int p = 0; p < POSTERS; p++) {
		for (int i = 0; i < ITEMS; i++) {
			items[p][i].poster = p;
			items[p][i].idx = i;
		}
		REQUIRE(pthread_create(&t[p], NULL, poster, (void *)(intptr_t)p) == 0);
	}
	double end = test_now() + test_stress_seconds(1.5);
	while (test_now() < end) {
		if (test_rand(&seed) % 64 == 0) {
			owner_process(mailbox_close(&box));
			/* held closed: no post may land, so the word stays the flag */
			for (int i = 0; i < 200; i++) {
				REQUIRE(mailbox_peek(&box) == MAILBOX_CLOSED);
				cpu_relax();
			}
			REQUIRE(mailbox_take(&box) == NULL && mailbox_closed(&box));
			mailbox_open(&box);
			closes++;
		} else {
			owner_process(mailbox_take(&box));
		}
	}
	atomic_set(&stop, 1);
	for (int p = 0; p < POSTERS; p++)
		REQUIRE(pthread_join(t[p], NULL) == 0);
	owner_process(mailbox_close(&box));

	CHECK_EQ(atomic_long_read(&posted), atomic_long_read(&taken));
	CHECK(closes > 0);
	for (int p = 0; p < POSTERS; p++) {
		int back = 0;
		for (struct mailbox_node *m = mailbox_take(&returns[p]); m; m = m->next)
			back++;
		CHECK_EQ(left_with[p] + back, ITEMS);
		for (int i = 0; i < ITEMS; i++)
			CHECK_EQ(atomic_read(&items[p][i].state), 0);
	}
	printf("atomic_mailbox_stress: %ld posted and taken, %ld refused while closed, %ld closes\n",
	       atomic_long_read(&posted), atomic_long_read(&refused), closes);
	return test_done("atomic_mailbox_stress");
}
