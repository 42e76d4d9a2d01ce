/*
 * object_test_unit - the one object test (slab.h: object_offset_valid, "off
 * is k * stride with k < objects" in a multiply and a compare) is exact
 * where the library relies on it: for every offset inside a slab, and -
 * what uslab.h's inline free needs, as it has no bound on the pointer it is
 * given - for every address difference of user space, -2^48 < off < 2^48,
 * while the stride is at most STRIDE_EXACT_MAX. Every stride a cache can
 * have up to that bound (multiples of 8), with the largest object count a
 * slab can hold, against offsets at and around every object boundary near
 * the ends, around the ends of user space, and random ones.
 */
#include "test.h"
#include "slab.h"

#include <stdint.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next_random(void)   /* xorshift64* */
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545f4914f6cdd1dull;
}

static long failures;

static void check(uint32_t stride, uint32_t objects, uint64_t magic, uint64_t limit, int64_t off)
{
	bool want = off >= 0 && off % stride == 0 && off / stride < objects;

	if (object_offset_valid(magic, limit, (uintptr_t)off) != want && failures++ < 10)
		CHECK(!"object_offset_valid is not exact");
}

int main(void)
{
	const int64_t span = (int64_t)1 << 48;   /* user space's addresses are below */

	for (uint32_t stride = 8; stride <= STRIDE_EXACT_MAX; stride += 8) {
		uint32_t objects = (uint32_t)(((uint64_t)SLAB_MAX_UNITS * UNIT_SIZE) / stride);
		uint64_t magic, limit;

		object_index_magic(stride, objects, &magic, &limit);
		for (int64_t k = 0; k < 3; k++)
			for (int64_t d = -2; d <= 2; d++) {
				check(stride, objects, magic, limit, k * stride + d);
				check(stride, objects, magic, limit, (objects - 1 + k) * (int64_t)stride + d);
				check(stride, objects, magic, limit, span - 1 - k * stride - d);
				check(stride, objects, magic, limit, -span + 1 + k * stride + d);
			}
		for (int i = 0; i < 200; i++) {
			int64_t off = (int64_t)(next_random() % (2 * (uint64_t)span - 1)) - (span - 1);

			check(stride, objects, magic, limit, off);
			check(stride, objects, magic, limit, off - off % stride);   /* a multiple */
		}
	}
	CHECK_EQ(failures, 0);
	return test_done("object_test_unit");
}
