/* atomic_bits_unit - single-threaded semantics of bits.h. */
#include "test.h"
#include "bits.h"

#define A (1UL << 0)
#define B (1UL << 5)
#define C (1UL << 63)          /* the sign bit of the underlying long */

static void test_plain(void)
{
	atomic_long_t w = ATOMIC_INIT(0);

	CHECK_EQ(bits_read(&w), 0);
	CHECK(!bits_test(&w, A | B | C));

	bits_set(&w, A);
	CHECK(bits_test(&w, A));
	CHECK(bits_test(&w, A | B));              /* any bit of the mask */
	CHECK(!bits_test(&w, B));
	bits_set(&w, B | C);
	CHECK(bits_read(&w) == (A | B | C));
	CHECK(bits_test(&w, C));

	bits_clear(&w, A | C);
	CHECK(bits_read(&w) == B);
	bits_clear(&w, A);                        /* clearing clear bits: no-op */
	CHECK(bits_read(&w) == B);
	bits_clear(&w, B);
	CHECK_EQ(bits_read(&w), 0);

	/* the empty mask */
	bits_set(&w, 0);
	CHECK_EQ(bits_read(&w), 0);
	CHECK(!bits_test(&w, 0));

	/* all bits */
	bits_set(&w, ~0UL);
	CHECK(bits_read(&w) == ~0UL);
	bits_clear(&w, ~0UL);
	CHECK_EQ(bits_read(&w), 0);
}

static void test_fetch(void)
{
	atomic_long_t w = ATOMIC_INIT(0);

	/* fetch_or reports which bits of the mask were already set */
	CHECK_EQ(bits_fetch_or(&w, A), 0);
	CHECK(bits_fetch_or(&w, A | B) == A);
	CHECK(bits_read(&w) == (A | B));
	CHECK(bits_fetch_or(&w, C) == 0);
	CHECK(bits_fetch_or(&w, C) == C);

	/* fetch_andnot clears the mask and reports which of its bits were set */
	CHECK(bits_fetch_andnot(&w, A | C) == (A | C));
	CHECK(bits_read(&w) == B);
	CHECK(bits_fetch_andnot(&w, A | C) == 0);
	CHECK(bits_read(&w) == B);
	CHECK(bits_fetch_andnot(&w, 0) == 0);
	CHECK(bits_read(&w) == B);

	bits_set(&w, ~0UL);
	CHECK(bits_fetch_andnot(&w, ~0UL) == ~0UL);
	CHECK_EQ(bits_read(&w), 0);
}

static void test_coupled(void)
{
	atomic_long_t w = ATOMIC_INIT(0);

	/* clear A unless B: refused while B is set, word untouched */
	bits_set(&w, A | B);
	CHECK(!bits_try_clear_unless(&w, A, B));
	CHECK(bits_read(&w) == (A | B));
	bits_clear(&w, B);
	CHECK(bits_try_clear_unless(&w, A, B));
	CHECK_EQ(bits_read(&w), 0);
	CHECK(bits_try_clear_unless(&w, A, B));   /* A already clear: success */
	CHECK_EQ(bits_read(&w), 0);

	/* set A unless B */
	bits_set(&w, B);
	CHECK(!bits_try_set_unless(&w, A, B));
	CHECK(bits_read(&w) == B);
	bits_clear(&w, B);
	CHECK(bits_try_set_unless(&w, A, B));
	CHECK(bits_read(&w) == A);

	/* a multi-bit guard refuses if any of its bits is set */
	bits_set(&w, C);
	CHECK(!bits_try_set_unless(&w, B, B | C));
	CHECK(!bits_try_clear_unless(&w, A, B | C));
	CHECK(bits_read(&w) == (A | C));
	CHECK(bits_try_clear_unless(&w, A | C, B));
	CHECK_EQ(bits_read(&w), 0);

	/* set == guard is a try-lock bit */
	CHECK(bits_try_set_unless(&w, C, C));
	CHECK(!bits_try_set_unless(&w, C, C));
	CHECK(bits_read(&w) == C);
	bits_clear(&w, C);
	CHECK(bits_try_set_unless(&w, C, C));
	bits_clear(&w, C);

	/* empty masks: no guard never refuses, nothing to change */
	CHECK(bits_try_set_unless(&w, 0, 0));
	CHECK(bits_try_clear_unless(&w, 0, 0));
	CHECK_EQ(bits_read(&w), 0);

	/* other bits are preserved by both */
	bits_set(&w, ~(A | B));
	CHECK(bits_try_set_unless(&w, A, B));
	CHECK(bits_read(&w) == ~B);
	CHECK(bits_try_clear_unless(&w, A, B));
	CHECK(bits_read(&w) == ~(A | B));
}

int main(void)
{
	test_plain();
	test_fetch();
	test_coupled();
	return test_done("atomic_bits_unit");
}
