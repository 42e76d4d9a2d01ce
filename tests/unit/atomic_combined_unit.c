/* atomic_combined_unit - single-threaded semantics of combined.h. */
#include "test.h"
#include "combined.h"

static void read_pair(struct combined *c, uint32_t *in, uint32_t *done)
{
	combined_read(c, in, done);
}

static void test_basic(void)
{
	struct combined c = COMBINED_INIT;
	uint32_t in, done;

	read_pair(&c, &in, &done);
	CHECK_EQ(in, 0);
	CHECK_EQ(done, 0);

	combined_start(&c);
	combined_start(&c);
	combined_start(&c);
	read_pair(&c, &in, &done);
	CHECK_EQ(in, 3);
	CHECK_EQ(done, 0);

	combined_finish(&c);
	read_pair(&c, &in, &done);
	CHECK_EQ(in, 2);
	CHECK_EQ(done, 1);

	combined_finish(&c);
	combined_finish(&c);
	read_pair(&c, &in, &done);
	CHECK_EQ(in, 0);
	CHECK_EQ(done, 3);
	/* completed sits in the high half, in-flight in the low half */
	CHECK_EQ((unsigned long)atomic_long_read(&c.xword), 3UL << 32);

	combined_init(&c);
	read_pair(&c, &in, &done);
	CHECK_EQ(in, 0);
	CHECK_EQ(done, 0);
}

static void test_edges(void)
{
	struct combined c;
	uint32_t in, done;

	/* the largest in-flight count: finish still borrows correctly */
	atomic_long_set(&c.xword, 0xffffffffL);
	read_pair(&c, &in, &done);
	CHECK_EQ(in, 0xffffffffu);
	CHECK_EQ(done, 0);
	combined_finish(&c);
	read_pair(&c, &in, &done);
	CHECK_EQ(in, 0xfffffffeu);
	CHECK_EQ(done, 1);

	/* completed wraps mod 2^32 and the carry leaves the word */
	atomic_long_set(&c.xword, (long)((0xffffffffUL << 32) | 1));
	combined_finish(&c);
	read_pair(&c, &in, &done);
	CHECK_EQ(in, 0);
	CHECK_EQ(done, 0);
	CHECK_EQ(atomic_long_read(&c.xword), 0);

	/* a start never touches the completed half, even at its top */
	atomic_long_set(&c.xword, (long)(0x80000000UL << 32));
	combined_start(&c);
	read_pair(&c, &in, &done);
	CHECK_EQ(in, 1);
	CHECK_EQ(done, 0x80000000u);

	/* many interleaved start/finish: started == in + done throughout */
	combined_init(&c);
	uint32_t started = 0;
	uint64_t seed = 42;
	for (int i = 0; i < 100000; i++) {
		read_pair(&c, &in, &done);
		if (in > 0 && (test_rand(&seed) & 1)) {
			combined_finish(&c);
		} else {
			combined_start(&c);
			started++;
		}
		read_pair(&c, &in, &done);
		if (in + done != started) {
			CHECK_EQ(in + done, started);
			break;
		}
	}
}

int main(void)
{
	test_basic();
	test_edges();
	return test_done("atomic_combined_unit");
}
