/* atomic_mailbox_unit - single-threaded semantics of mailbox.h. */
#include "test.h"
#include "mailbox.h"

struct item {
	struct mailbox_node node;   /* first: the box links items through it */
	int id;
};

static int ids(struct mailbox_node *n, int *out, int max)
{
	int k = 0;

	for (; n && k < max; n = n->next)
		out[k++] = ((struct item *)n)->id;
	return k;
}

static void test_post_take(void)
{
	struct mailbox mb = MAILBOX_INIT;
	struct item it[3] = { { .id = 1 }, { .id = 2 }, { .id = 3 } };
	int got[4];

	CHECK_EQ(mailbox_peek(&mb), 0);
	CHECK(mailbox_take(&mb) == NULL);
	for (int i = 0; i < 3; i++)
		CHECK(mailbox_post(&mb, &it[i].node));
	CHECK_EQ(mailbox_peek(&mb), (uintptr_t)&it[2].node);
	/* taken whole, last posted first */
	CHECK_EQ(ids(mailbox_take(&mb), got, 4), 3);
	CHECK(got[0] == 3 && got[1] == 2 && got[2] == 1);
	CHECK_EQ(mailbox_peek(&mb), 0);
	CHECK(mailbox_take(&mb) == NULL);
}

static void test_close_open(void)
{
	struct mailbox mb = MAILBOX_INIT;
	struct item a = { .id = 1 }, b = { .id = 2 };
	int got[4];

	CHECK(mailbox_post(&mb, &a.node));
	/* close takes what is there and sets the flag in the same exchange */
	CHECK_EQ(ids(mailbox_close(&mb), got, 4), 1);
	CHECK_EQ(got[0], 1);
	CHECK(mailbox_closed(&mb));
	CHECK_EQ(mailbox_peek(&mb), MAILBOX_CLOSED);
	/* a closed box refuses posts and leaves the node alone */
	b.node.next = (struct mailbox_node *)0x1234;
	CHECK(!mailbox_post(&mb, &b.node));
	CHECK(b.node.next == (struct mailbox_node *)0x1234);
	/* take keeps the flag; a second close finds nothing */
	CHECK(mailbox_take(&mb) == NULL);
	CHECK(mailbox_closed(&mb));
	CHECK(mailbox_close(&mb) == NULL);
	/* reopened, it works as new */
	mailbox_open(&mb);
	CHECK(!mailbox_closed(&mb));
	CHECK(mailbox_post(&mb, &b.node));
	CHECK_EQ(ids(mailbox_take(&mb), got, 4), 1);
	CHECK_EQ(got[0], 2);
}

int main(void)
{
	test_post_take();
	test_close_open();
	return test_done("atomic_mailbox_unit");
}
