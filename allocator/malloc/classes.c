/* SPDX-License-Identifier: MIT */
/*
 * classes.c - malloc's size classes: the tables that map a size to its
 * class, and the static caches behind them, each set up lazily by its first
 * slow-path allocation (kmalloc_class_cache): before that its cpu slabs are
 * the empty ones, so the fast path needs no "initialised?" test. Also the
 * start-up classes (below).
 */
#include "local.h"
#include "options.h"

#include <errno.h>

/* kmalloc_statics is in api/layout.c */

const uint8_t kmalloc_slot_class[NR_CLASSES] = {
	0, 1, 3, 7, 11, 15, 19, 24, 29, 34, 39, 44, 48, 56,   /* 16 B, 32 B, ... 128 KiB */
	2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 16, 17, 18, 20, 21, 22, 23, 25, 26,
	27, 28, 30, 31, 32, 33, 35, 36, 37, 38, 40, 41, 42, 43, 45, 46, 47, 49,
	50, 51, 52, 53, 54, 55,
};

const uint8_t kmalloc_slot[NR_CLASSES] = {
	0, 1, 14, 2, 15, 16, 17, 3, 18, 19, 20, 4, 21, 22, 23, 5, 24, 25, 26,
	6, 27, 28, 29, 30, 7, 31, 32, 33, 34, 8, 35, 36, 37, 38, 9, 39, 40, 41,
	42, 10, 43, 44, 45, 46, 11, 47, 48, 49, 12, 50, 51, 52, 53, 54, 55, 56,
	13,
};

/* size_class() for n <= 1024, as cpu-slab offsets, indexed by n itself: 2 KiB
 * (a line covers 32 sizes), and no rounding instructions on the fast path */
#define C(cls) ((cls) << CPU_SLAB_SHIFT)
const uint16_t kmalloc_small_off[1025] __attribute__((aligned(CACHE_LINE))) = {
	[0 ... 16] = C(0),
	[17 ... 32] = C(1),
	[33 ... 48] = C(2),
	[49 ... 64] = C(3),
	[65 ... 80] = C(4),
	[81 ... 96] = C(5),
	[97 ... 112] = C(6),
	[113 ... 128] = C(7),
	[129 ... 160] = C(8),
	[161 ... 192] = C(9),
	[193 ... 224] = C(10),
	[225 ... 256] = C(11),
	[257 ... 320] = C(12),
	[321 ... 384] = C(13),
	[385 ... 448] = C(14),
	[449 ... 512] = C(15),
	[513 ... 640] = C(16),
	[641 ... 768] = C(17),
	[769 ... 896] = C(18),
	[897 ... 1024] = C(19),
};
#undef C

const uint32_t kmalloc_class_size[NR_CLASSES] = {
	16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512,
	640, 768, 896, 1024,
	1152, 1280, 1536, 1792, 2048, 2304, 2560, 3072, 3584, 4096, 4608, 5120, 6144,
	7168, 8192, 9216, 10240, 12288, 14336, 16384, 18432, 20480, 24576, 28672,
	32768, 40960, 49152, 57344, 65536, 73728, 81920, 90112, 98304, 106496,
	114688, 122880, 131072,
};

/* size_class() for 1024 < n <= SMALL_MAX, indexed by (n - 1) / 128: every
 * class above 1 KiB is a multiple of 128. */
const uint8_t kmalloc_big_class[SMALL_MAX / 128] = {
	[8] = 20,   /* 1152 */
	[9] = 21,   /* 1280 */
	[10 ... 11] = 22,   /* 1536 */
	[12 ... 13] = 23,   /* 1792 */
	[14 ... 15] = 24,   /* 2048 */
	[16 ... 17] = 25,   /* 2304 */
	[18 ... 19] = 26,   /* 2560 */
	[20 ... 23] = 27,   /* 3072 */
	[24 ... 27] = 28,   /* 3584 */
	[28 ... 31] = 29,   /* 4096 */
	[32 ... 35] = 30,   /* 4608 */
	[36 ... 39] = 31,   /* 5120 */
	[40 ... 47] = 32,   /* 6144 */
	[48 ... 55] = 33,   /* 7168 */
	[56 ... 63] = 34,   /* 8192 */
	[64 ... 71] = 35,   /* 9216 */
	[72 ... 79] = 36,   /* 10240 */
	[80 ... 95] = 37,   /* 12288 */
	[96 ... 111] = 38,   /* 14336 */
	[112 ... 127] = 39,   /* 16384 */
	[128 ... 143] = 40,   /* 18432 */
	[144 ... 159] = 41,   /* 20480 */
	[160 ... 191] = 42,   /* 24576 */
	[192 ... 223] = 43,   /* 28672 */
	[224 ... 255] = 44,   /* 32768 */
	[256 ... 319] = 45,   /* 40960 */
	[320 ... 383] = 46,   /* 49152 */
	[384 ... 447] = 47,   /* 57344 */
	[448 ... 511] = 48,   /* 65536 */
	[512 ... 575] = 49,   /* 73728 */
	[576 ... 639] = 50,   /* 81920 */
	[640 ... 703] = 51,   /* 90112 */
	[704 ... 767] = 52,   /* 98304 */
	[768 ... 831] = 53,   /* 106496 */
	[832 ... 895] = 54,   /* 114688 */
	[896 ... 959] = 55,   /* 122880 */
	[960 ... 1023] = 56,   /* 131072 */
};

/*
 * Start-up classes. Every class a process uses costs it at least one page of
 * its own slab, a setup and lines of its heap; a short-lived program (md5sum,
 * sh, sort on a small file) spreads a few hundred blocks over some 20
 * classes, and first touches of pages are what its time goes to. So
 * until some class needs a second slab, a request whose class is not set up
 * yet is served from the power-of-two class above it (16 B ... 128 KiB, 14
 * classes instead of 57): at most half a block wasted, in at most one slab
 * per start-up class. Done in the slow path (the fine class's cpu slab stays
 * empty, so its requests land there), which leaves the fast path and its
 * tables as they are; so it also ends after STARTUP_REDIRECTS_MAX slow-path
 * visits of classes not set up. USLAB_STARTUP_CLASSES=0 ends it at the first
 * slow path.
 */
bool kmalloc_startup = true;

/* Redirected requests so far, and how many end the start-up classes too: a
 * program that keeps allocating and freeing a few blocks of one size never
 * needs a second slab, and would otherwise pay the slow path on every one
 * of them for good (docs/malloc.md has the cost). */
static atomic_long_t startup_redirects;
#define STARTUP_REDIRECTS_MAX 4096

static unsigned startup_class(unsigned c)
{
	size_t p = 16;

	while (p < kmalloc_class_size[c])
		p <<= 1;
	return size_class(p);
}

static mutex_t kmalloc_init_lock = MUTEX_INIT;
FORK_LOCK(kmalloc_init_lock, RANK_KMALLOC_INIT);

/* From here on every class is set up on its first use (start-up classes). */
void kmalloc_startup_end(void)
{
	WRITE_ONCE(kmalloc_startup, false);
}

/*
 * Set up kmalloc cache s on its first slow-path allocation. One class at a
 * time: a short-lived program that uses a dozen classes pays for a dozen
 * (each setup writes its cache's lines), not for all of them. Returns the
 * cache to allocate from: s, or its start-up class; NULL (ENOMEM) if the
 * setup failed.
 */
static struct uslab_cache *kmalloc_class_init(struct uslab_cache *s)
{
	unsigned i = kmalloc_class_of(s);
	int err = 0;

	options_init();
	if (READ_ONCE(kmalloc_startup)) {
		unsigned t = startup_class(i);

		if (!option(OPT_STARTUP_CLASSES) ||
		    atomic_long_inc_return_relaxed(&startup_redirects) > STARTUP_REDIRECTS_MAX)
			kmalloc_startup_end();
		else if (t != i)
			return kmalloc_cache(t);
	}
	lock_ranked(&kmalloc_init_lock, RANK_KMALLOC_INIT);
	if (kmalloc_unready(s)) {
		char name[24];
		unsigned sz = kmalloc_class_size[i];
		/* natural alignment of the class: its power-of-two factor, max 16 */
		unsigned align = sz & -sz;

		if (align > 16)
			align = 16;
		/* "kmalloc-<size>", without snprintf (see name_copy) */
		char digits[12], *d = digits + sizeof(digits);
		*--d = 0;
		unsigned v = sz;
		do
			*--d = (char)('0' + v % 10);
		while (v /= 10);
		name_copy(name, sizeof(name), "kmalloc-");
		name_copy(name + 8, sizeof(name) - 8, d);
		/* no constructor: the free pointer is at offset 0, which
		 * kmalloc()/kfree() use as a constant */
		err = cache_setup(s, name, sz, align, CACHE_MALLOC, NULL, (int)i, kmalloc_slot[i]);
		/* release: pairs with the acquire in kmalloc_unready, so a
		 * class is used only once its whole setup is visible */
		if (!err)
			smp_store_release(&kmalloc_statics.ready,
					  kmalloc_statics.ready | 1ull << (s - kmalloc_store));
	}
	unlock_ranked(&kmalloc_init_lock, RANK_KMALLOC_INIT);
	if (err) {
		errno = ENOMEM;
		return NULL;
	}
	return s;
}


/*
 * An object of class cache s, its slow path included: s set up first if it
 * is not yet (or, while the start-up classes last, its start-up class
 * instead). NULL with errno = ENOMEM.
 */
void *kmalloc_class_alloc(struct uslab_cache *s)
{
	void *p;

	while (unlikely(kmalloc_unready(s))) {
		s = kmalloc_class_init(s);
		if (!s)
			return NULL;
	}
	p = cache_alloc_fast(s);
	/* a class that needs a second slab: the program is no longer just
	 * starting */
	if (unlikely(READ_ONCE(kmalloc_startup)) && atomic_long_read(&s->slabs_allocated) > 1)
		kmalloc_startup_end();
	return p;
}

