/* atomic_biased_unit - single-threaded semantics of biased.h. */
#include "test.h"
#include "biased.h"

#include <limits.h>

static void test_word_helpers(void)
{
	CHECK_EQ(biased_word_count(0), 0);
	CHECK(!biased_word_flag(0));
	CHECK_EQ(biased_word_count(BIASED_FLAG), 0);
	CHECK(biased_word_flag(BIASED_FLAG));
	CHECK_EQ(biased_word_count(0x7fffffffu), 0x7fffffff);
	CHECK(!biased_word_flag(0x7fffffffu));
	CHECK_EQ(biased_word_count(0xffffffffu), 0x7fffffff);
	CHECK(biased_word_flag(0xffffffffu));
	CHECK_EQ(BIASED_FLAG, (unsigned int)INT_MIN);
}

static void test_cycle(void)
{
	struct biased b = BIASED_INIT;

	CHECK_EQ(biased_read(&b), 0);
	CHECK_EQ(biased_count(&b), 0);
	CHECK(!biased_flag(&b));

	CHECK(biased_try_get(&b));
	CHECK_EQ(biased_count(&b), 1);
	CHECK_EQ(biased_inc_return(&b), 2);     /* raw inc: we hold a use */
	CHECK_EQ(biased_dec_return(&b), 1);

	/* the flag cannot be set while a use is held; nothing changes */
	CHECK(!biased_try_set_flag(&b));
	CHECK_EQ(biased_read(&b), 1);

	CHECK_EQ(biased_dec_return(&b), 0);
	CHECK(biased_try_set_flag(&b));
	CHECK_EQ(biased_read(&b), BIASED_FLAG);
	CHECK(biased_flag(&b));
	CHECK_EQ(biased_count(&b), 0);

	/* being released: a second set and any get fail, word unchanged */
	CHECK(!biased_try_set_flag(&b));
	CHECK(!biased_try_get(&b));
	CHECK(!biased_try_get(&b));
	CHECK_EQ(biased_read(&b), BIASED_FLAG);

	biased_clear_flag(&b);
	CHECK_EQ(biased_read(&b), 0);
	CHECK(!biased_flag(&b));
	CHECK(biased_try_get(&b));
	CHECK_EQ(biased_read(&b), 1);
	CHECK_EQ(biased_dec_return(&b), 0);

	biased_init(&b);
	CHECK_EQ(biased_read(&b), 0);
}

static void test_edges(void)
{
	struct biased b = BIASED_INIT;

	/* saturation: one below the flag bit is the largest count */
	atomic_set(&b.xword, INT_MAX - 1);
	CHECK(biased_try_get(&b));
	CHECK_EQ(biased_count(&b), 0x7fffffff);
	CHECK(!biased_flag(&b));
	CHECK(!biased_try_get(&b));               /* would carry into the flag */
	CHECK_EQ(biased_read(&b), 0x7fffffffu);
	CHECK(!biased_try_set_flag(&b));
	CHECK_EQ(biased_dec_return(&b), INT_MAX - 1);

	/* dropping a use that is not there is reported as a negative count */
	biased_init(&b);
	CHECK(biased_dec_return(&b) < 0);
	biased_init(&b);

	/* set/clear cycles leave no residue */
	for (int i = 0; i < 1000; i++) {
		if (!biased_try_set_flag(&b))
			break;
		biased_clear_flag(&b);
	}
	CHECK_EQ(biased_read(&b), 0);
}

int main(void)
{
	test_word_helpers();
	test_cycle();
	test_edges();
	return test_done("atomic_biased_unit");
}
