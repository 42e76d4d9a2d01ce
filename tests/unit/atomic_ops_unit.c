/*
 * atomic_ops_unit - values returned and left behind by every op family of
 * atomic.h, for atomic_t and atomic_long_t alike (one macro-generated test
 * per type), including wrap-around at the type's edges.
 *
 * The __atomic builtins wrap signed arithmetic (GCC defines it as two's
 * complement), and add_unless/dec_if_positive compute in unsigned, so the
 * edge cases here are well-defined and UBSan must stay quiet.
 * Orderings cannot be observed from one thread; the stress tests of the
 * primitives built on these ops cover them.
 */
#include "test.h"
#include "atomic.h"

#include <limits.h>

#define DEFINE_FAMILY_TEST(pfx, T, TMAX, TMIN)                                      \
static void test_##pfx(void)                                                        \
{                                                                                   \
	pfx##_t v = ATOMIC_INIT(5);                                                 \
	T old;                                                                      \
                                                                                    \
	/* read / set */                                                            \
	CHECK_EQ(pfx##_read(&v), 5);                                                \
	pfx##_set(&v, -7);                                                          \
	CHECK_EQ(pfx##_read(&v), -7);                                               \
	pfx##_set_release(&v, 11);                                                  \
	CHECK_EQ(pfx##_read_acquire(&v), 11);                                       \
                                                                                    \
	/* void ops */                                                              \
	pfx##_add(4, &v);       CHECK_EQ(pfx##_read(&v), 15);                       \
	pfx##_sub(20, &v);      CHECK_EQ(pfx##_read(&v), -5);                       \
	pfx##_inc(&v);          CHECK_EQ(pfx##_read(&v), -4);                       \
	pfx##_dec(&v);          CHECK_EQ(pfx##_read(&v), -5);                       \
	pfx##_set(&v, 0x0f0);                                                       \
	pfx##_or(0x00f, &v);    CHECK_EQ(pfx##_read(&v), 0x0ff);                    \
	pfx##_and(0x03c, &v);   CHECK_EQ(pfx##_read(&v), 0x03c);                    \
	pfx##_xor(0x0ff, &v);   CHECK_EQ(pfx##_read(&v), 0x0c3);                    \
	pfx##_andnot(0x003, &v); CHECK_EQ(pfx##_read(&v), 0x0c0);                   \
                                                                                    \
	/* _return: the new value; fetch_: the old one, in every ordering */        \
	pfx##_set(&v, 10);                                                          \
	CHECK_EQ(pfx##_add_return(5, &v), 15);                                      \
	CHECK_EQ(pfx##_add_return_relaxed(1, &v), 16);                              \
	CHECK_EQ(pfx##_add_return_acquire(1, &v), 17);                              \
	CHECK_EQ(pfx##_add_return_release(1, &v), 18);                              \
	CHECK_EQ(pfx##_sub_return(8, &v), 10);                                      \
	CHECK_EQ(pfx##_sub_return_relaxed(1, &v), 9);                               \
	CHECK_EQ(pfx##_sub_return_acquire(1, &v), 8);                               \
	CHECK_EQ(pfx##_sub_return_release(1, &v), 7);                               \
	CHECK_EQ(pfx##_inc_return(&v), 8);                                          \
	CHECK_EQ(pfx##_inc_return_relaxed(&v), 9);                                  \
	CHECK_EQ(pfx##_dec_return(&v), 8);                                          \
	CHECK_EQ(pfx##_dec_return_release(&v), 7);                                  \
	CHECK_EQ(pfx##_fetch_add(3, &v), 7);                                        \
	CHECK_EQ(pfx##_fetch_add_relaxed(1, &v), 10);                               \
	CHECK_EQ(pfx##_fetch_add_acquire(1, &v), 11);                               \
	CHECK_EQ(pfx##_fetch_add_release(1, &v), 12);                               \
	CHECK_EQ(pfx##_fetch_sub(3, &v), 13);                                       \
	CHECK_EQ(pfx##_fetch_sub_relaxed(1, &v), 10);                               \
	CHECK_EQ(pfx##_fetch_sub_acquire(1, &v), 9);                                \
	CHECK_EQ(pfx##_fetch_sub_release(1, &v), 8);                                \
	CHECK_EQ(pfx##_read(&v), 7);                                                \
                                                                                    \
	/* bitwise fetch_ ops return the old value and leave the new one */         \
	pfx##_set(&v, 0x0f0);                                                       \
	CHECK_EQ(pfx##_fetch_or(0x00f, &v), 0x0f0);      CHECK_EQ(pfx##_read(&v), 0x0ff); \
	CHECK_EQ(pfx##_fetch_or_relaxed(0x100, &v), 0x0ff);                         \
	CHECK_EQ(pfx##_fetch_or_acquire(0x200, &v), 0x1ff);                         \
	CHECK_EQ(pfx##_fetch_or_release(0x400, &v), 0x3ff);                         \
	CHECK_EQ(pfx##_fetch_and(0x70f, &v), 0x7ff);     CHECK_EQ(pfx##_read(&v), 0x70f); \
	CHECK_EQ(pfx##_fetch_and_relaxed(0x30f, &v), 0x70f);                        \
	CHECK_EQ(pfx##_fetch_and_acquire(0x10f, &v), 0x30f);                        \
	CHECK_EQ(pfx##_fetch_and_release(0x00f, &v), 0x10f);                        \
	CHECK_EQ(pfx##_fetch_xor(0x0ff, &v), 0x00f);     CHECK_EQ(pfx##_read(&v), 0x0f0); \
	CHECK_EQ(pfx##_fetch_xor_relaxed(0x0f0, &v), 0x0f0);                        \
	CHECK_EQ(pfx##_fetch_xor_acquire(0x001, &v), 0x000);                        \
	CHECK_EQ(pfx##_fetch_xor_release(0x003, &v), 0x001);                        \
	CHECK_EQ(pfx##_read(&v), 0x002);                                            \
	pfx##_set(&v, 0x0ff);                                                       \
	CHECK_EQ(pfx##_fetch_andnot(0x00f, &v), 0x0ff);  CHECK_EQ(pfx##_read(&v), 0x0f0); \
	CHECK_EQ(pfx##_fetch_andnot_relaxed(0x030, &v), 0x0f0);                     \
	CHECK_EQ(pfx##_fetch_andnot_release(0x0c0, &v), 0x0c0);                     \
	CHECK_EQ(pfx##_read(&v), 0);                                                \
	/* andnot of a bit that is clear leaves the word alone */                   \
	pfx##_set(&v, 0x5);                                                         \
	CHECK_EQ(pfx##_fetch_andnot(0x2, &v), 0x5);      CHECK_EQ(pfx##_read(&v), 0x5); \
                                                                                    \
	/* xchg */                                                                  \
	CHECK_EQ(pfx##_xchg(&v, 42), 5);                 CHECK_EQ(pfx##_read(&v), 42); \
	CHECK_EQ(pfx##_xchg_val_relaxed(43, &v), 42);                               \
	CHECK_EQ(pfx##_xchg_val_acquire(44, &v), 43);                               \
	CHECK_EQ(pfx##_xchg_val_release(45, &v), 44);                               \
	CHECK_EQ(pfx##_read(&v), 45);                                               \
                                                                                    \
	/* cmpxchg returns what it saw; it equals old iff the swap happened */      \
	CHECK_EQ(pfx##_cmpxchg(&v, 45, 46), 45);         CHECK_EQ(pfx##_read(&v), 46); \
	CHECK_EQ(pfx##_cmpxchg(&v, 45, 99), 46);         CHECK_EQ(pfx##_read(&v), 46); \
	CHECK_EQ(pfx##_cmpxchg_relaxed(&v, 46, 47), 46); CHECK_EQ(pfx##_read(&v), 47); \
	CHECK_EQ(pfx##_cmpxchg_relaxed(&v, 0, 1), 47);   CHECK_EQ(pfx##_read(&v), 47); \
                                                                                    \
	/* try_cmpxchg: true on success; on failure *old gets the value seen */     \
	old = 47;                                                                   \
	CHECK(pfx##_try_cmpxchg(&v, &old, 48));          CHECK_EQ(old, 47);         \
	CHECK_EQ(pfx##_read(&v), 48);                                               \
	old = 1;                                                                    \
	CHECK(!pfx##_try_cmpxchg(&v, &old, 99));         CHECK_EQ(old, 48);         \
	CHECK_EQ(pfx##_read(&v), 48);                                               \
	old = 2;                                                                    \
	CHECK(!pfx##_try_cmpxchg_relaxed(&v, &old, 99)); CHECK_EQ(old, 48);         \
	CHECK(pfx##_try_cmpxchg_relaxed(&v, &old, 49));  CHECK_EQ(pfx##_read(&v), 49); \
	old = 3;                                                                    \
	CHECK(!pfx##_try_cmpxchg_acquire(&v, &old, 99)); CHECK_EQ(old, 49);         \
	CHECK(pfx##_try_cmpxchg_acquire(&v, &old, 50));  CHECK_EQ(pfx##_read(&v), 50); \
	old = 4;                                                                    \
	CHECK(!pfx##_try_cmpxchg_release(&v, &old, 99)); CHECK_EQ(old, 50);         \
	CHECK(pfx##_try_cmpxchg_release(&v, &old, 51));  CHECK_EQ(pfx##_read(&v), 51); \
                                                                                    \
	/* add_unless / inc_not_zero */                                             \
	pfx##_set(&v, 1);                                                           \
	CHECK(!pfx##_add_unless(&v, -1, 1));             CHECK_EQ(pfx##_read(&v), 1); \
	CHECK(pfx##_add_unless(&v, 5, 0));               CHECK_EQ(pfx##_read(&v), 6); \
	CHECK(pfx##_add_unless(&v, -1, 1));              CHECK_EQ(pfx##_read(&v), 5); \
	pfx##_set(&v, 0);                                                           \
	CHECK(!pfx##_inc_not_zero(&v));                  CHECK_EQ(pfx##_read(&v), 0); \
	pfx##_set(&v, -1);                                                          \
	CHECK(pfx##_inc_not_zero(&v));                   CHECK_EQ(pfx##_read(&v), 0); \
	CHECK(!pfx##_inc_not_zero(&v));                  CHECK_EQ(pfx##_read(&v), 0); \
                                                                                    \
	/* dec_and_test / sub_and_test: true exactly when the result is 0 */        \
	pfx##_set(&v, 2);                                                           \
	CHECK(!pfx##_dec_and_test(&v));                  CHECK_EQ(pfx##_read(&v), 1); \
	CHECK(pfx##_dec_and_test(&v));                   CHECK_EQ(pfx##_read(&v), 0); \
	CHECK(!pfx##_dec_and_test(&v));                  CHECK_EQ(pfx##_read(&v), -1); \
	pfx##_set(&v, 10);                                                          \
	CHECK(!pfx##_sub_and_test(3, &v));               CHECK_EQ(pfx##_read(&v), 7); \
	CHECK(pfx##_sub_and_test(7, &v));                CHECK_EQ(pfx##_read(&v), 0); \
                                                                                    \
	/* dec_if_positive: new value; below zero means nothing was stored */       \
	pfx##_set(&v, 2);                                                           \
	CHECK_EQ(pfx##_dec_if_positive(&v), 1);          CHECK_EQ(pfx##_read(&v), 1); \
	CHECK_EQ(pfx##_dec_if_positive(&v), 0);          CHECK_EQ(pfx##_read(&v), 0); \
	CHECK_EQ(pfx##_dec_if_positive(&v), -1);         CHECK_EQ(pfx##_read(&v), 0); \
	pfx##_set(&v, -5);                                                          \
	CHECK_EQ(pfx##_dec_if_positive(&v), -6);         CHECK_EQ(pfx##_read(&v), -5); \
	pfx##_set(&v, TMAX);                                                        \
	CHECK_EQ(pfx##_dec_if_positive(&v), TMAX - 1);   CHECK_EQ(pfx##_read(&v), TMAX - 1); \
	pfx##_set(&v, TMIN);                                                        \
	CHECK(pfx##_dec_if_positive(&v) == TMAX);  /* TMIN - 1 wraps; not stored */ \
	CHECK(pfx##_read(&v) == TMIN);                                              \
                                                                                    \
	/* edges: the builtins wrap, in both directions and for every family */     \
	pfx##_set(&v, TMAX);                                                        \
	CHECK(pfx##_add_return(1, &v) == TMIN);                                     \
	CHECK(pfx##_sub_return(1, &v) == TMAX);                                     \
	CHECK(pfx##_fetch_add(1, &v) == TMAX);           CHECK(pfx##_read(&v) == TMIN); \
	CHECK(pfx##_fetch_sub(1, &v) == TMIN);           CHECK(pfx##_read(&v) == TMAX); \
	pfx##_inc(&v);                                   CHECK(pfx##_read(&v) == TMIN); \
	pfx##_dec(&v);                                   CHECK(pfx##_read(&v) == TMAX); \
	CHECK(pfx##_inc_not_zero(&v));                   CHECK(pfx##_read(&v) == TMIN); \
	CHECK(pfx##_add_unless(&v, -1, 0));              CHECK(pfx##_read(&v) == TMAX); \
	CHECK(!pfx##_add_unless(&v, 1, TMAX));           CHECK(pfx##_read(&v) == TMAX); \
	pfx##_set(&v, TMIN);                                                        \
	CHECK(!pfx##_dec_and_test(&v));                  CHECK(pfx##_read(&v) == TMAX); \
	CHECK(pfx##_fetch_xor(-1, &v) == TMAX);          CHECK(pfx##_read(&v) == TMIN); \
	CHECK(pfx##_fetch_and(TMAX, &v) == TMIN);        CHECK_EQ(pfx##_read(&v), 0); \
	CHECK(pfx##_fetch_or(TMIN, &v) == 0);            CHECK(pfx##_read(&v) == TMIN); \
	CHECK(pfx##_fetch_andnot(TMIN, &v) == TMIN);     CHECK_EQ(pfx##_read(&v), 0); \
	CHECK(pfx##_xchg(&v, TMIN) == 0);                                           \
	old = TMIN;                                                                 \
	CHECK(pfx##_try_cmpxchg(&v, &old, TMAX));        CHECK(pfx##_read(&v) == TMAX); \
	CHECK(pfx##_sub_and_test(TMAX, &v));             CHECK_EQ(pfx##_read(&v), 0); \
}

DEFINE_FAMILY_TEST(atomic, int, INT_MAX, INT_MIN)
DEFINE_FAMILY_TEST(atomic_long, long, LONG_MAX, LONG_MIN)

/* atomic_long_t really is a long: values beyond 32 bits survive every family. */
static void test_long_width(void)
{
	atomic_long_t v = ATOMIC_INIT(1L << 40);

	CHECK(atomic_long_add_return(1L << 33, &v) == (1L << 40) + (1L << 33));
	CHECK(atomic_long_fetch_and(1L << 40, &v) == (1L << 40) + (1L << 33));
	CHECK(atomic_long_read(&v) == 1L << 40);
	CHECK(atomic_long_cmpxchg(&v, 1L << 40, 1L << 50) == 1L << 40);
	CHECK(atomic_long_dec_if_positive(&v) == (1L << 50) - 1);
	CHECK(atomic_long_add_unless(&v, 1L << 32, 0));
	CHECK(atomic_long_read(&v) == (1L << 50) - 1 + (1L << 32));
}

/* The plain-word helpers on a pointer and a byte. */
static void test_plain_words(void)
{
	int x = 1, y = 2;
	int *p = &x;
	uint8_t b = 0;

	CHECK(READ_ONCE(p) == &x);
	WRITE_ONCE(p, &y);
	CHECK(smp_load_acquire(&p) == &y);
	smp_store_release(&p, &x);
	CHECK(xchg_relaxed(&p, &y) == &x);
	CHECK(xchg_acquire(&p, &x) == &y);

	int *expect = &y;
	CHECK(!try_cmpxchg_ptr_acq_rel(&p, &expect, NULL));
	CHECK(expect == &x);
	CHECK(try_cmpxchg_ptr_release(&p, &expect, &y));
	CHECK(p == &y);

	uint8_t ob = 0;
	CHECK(try_cmpxchg_acq_rel(&b, &ob, 0xff));
	CHECK(!try_cmpxchg_acq_rel(&b, &ob, 1));
	CHECK_EQ(ob, 0xff);
	CHECK_EQ(b, 0xff);
}

int main(void)
{
	test_atomic();
	test_atomic_long();
	test_long_width();
	test_plain_words();
	return test_done("atomic_ops_unit");
}
