/* kmalloc_classes_unit - size_class() against a slow obvious model, and the
 * class table's promises (waste, alignment, cpu-slab offsets). */
#include "test.h"
#include "kmalloc.h"

/* The model: the first class whose size holds n. */
static unsigned model_class(size_t n)
{
	for (unsigned c = 0; c < NR_CLASSES; c++)
		if (kmalloc_class_size[c] >= n)
			return c;
	return NR_CLASSES;
}

int main(void)
{
	CHECK_EQ(kmalloc_class_size[NR_CLASSES - 1], SMALL_MAX);
	for (unsigned c = 1; c < NR_CLASSES; c++)
		CHECK(kmalloc_class_size[c] > kmalloc_class_size[c - 1]);

	for (size_t n = 1; n <= SMALL_MAX; n++) {
		unsigned c = size_class(n), m = model_class(n);
		if (c != m) {
			fprintf(stderr, "size_class(%zu) = %u, model says %u\n", n, c, m);
			test_failures++;
			break;
		}
		size_t sz = kmalloc_class_size[c];
		/* at most 25 % of the block is waste above 128 bytes */
		if (n > 128)
			CHECK((sz - n) * 4 <= sz);
		/* objects of class c are aligned to min(16, largest pow2 <= n) */
		size_t want = 16;
		while (want > n)
			want >>= 1;
		CHECK(sz % want == 0);
	}
	CHECK_EQ(size_class(0), 0);
	/* the malloc fast path's table: offsets of the class's cpu slab */
	CHECK_EQ(kmalloc_small_off[0], 0);
	for (size_t n = 1; n <= 1024; n++)
		CHECK_EQ(kmalloc_small_off[n],
			 model_class(n) * sizeof(struct cpu_slab));
	return test_done("kmalloc_classes_unit");
}
