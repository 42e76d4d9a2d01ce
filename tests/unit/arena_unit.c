/* arena_unit - the start-up arena (allocator/malloc/arena.c): a fresh process's first
 * blocks are cut densely from one static region, one after another; freed
 * ones are reused by their class; sizes, alignment, content, realloc and
 * calloc behave as for slabs; misuse is caught exactly; the arena ends after
 * ARENA_ALLOCS_MAX blocks, when it is used up or at the first request of a
 * second thread (not when a thread that does not allocate starts), and slabs
 * serve from then on while its blocks can still be freed. Runs with the arena on (the CMake
 * rule gives every other test USLAB_STARTUP_ARENA=0). */
#include "test.h"
#include "kmalloc_check.h"
#include "uslab.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* The first blocks: from the arena, densely, in order; every class. */
static void check_first_blocks(void)
{
	enum { N = 200 };
	static char *blk[N];
	static size_t len[N];

	CHECK(kmalloc_arena_on);
	for (unsigned i = 0; i < N; i++) {
		len[i] = 1 + (i * 37) % 1000;   /* ~100 KiB in all: the arena holds it */
		blk[i] = uslab_malloc(len[i]);
		REQUIRE(blk[i] != NULL);
		CHECK(arena_owns(blk[i]));
		CHECK((uintptr_t)blk[i] % 16 == 0);
		size_t us = uslab_malloc_usable_size(blk[i]);
		CHECK(us >= len[i]);
		CHECK_EQ(us, kmalloc_class_size[size_class(len[i])]);
		test_fill(blk[i], us);
		if (i)   /* cut one after another: no gaps beyond the 16-byte rounding */
			CHECK(blk[i] - blk[i - 1] ==
			      (long)((uslab_malloc_usable_size(blk[i - 1]) + 15) & ~15ul));
	}
	for (unsigned i = 0; i < N; i++)
		CHECK(test_intact(blk[i], uslab_malloc_usable_size(blk[i])));
	/* freed blocks come back to requests of their class, newest first */
	size_t cut = arena_cut_bytes();
	for (unsigned i = 0; i < N; i += 2)
		uslab_free(blk[i]);
	for (unsigned i = N; i >= 2; i -= 2) {
		char *p = uslab_malloc(len[i - 2]);
		CHECK(arena_owns(p));
		CHECK_EQ(uslab_malloc_usable_size(p), uslab_malloc_usable_size(blk[i - 2]));
		blk[i - 2] = p;
		test_fill(p, uslab_malloc_usable_size(p));
	}
	CHECK_EQ(arena_cut_bytes(), cut);   /* all reused, nothing cut */
	for (unsigned i = 0; i < N; i++) {
		CHECK(test_intact(blk[i], uslab_malloc_usable_size(blk[i])));
		uslab_free(blk[i]);
	}
	CHECK_EQ(arena_live_bytes(), 0);
}

/* realloc, calloc, the aligned calls and blocks above the small classes. */
static void check_api(void)
{
	char *p = uslab_malloc(100);
	REQUIRE(arena_owns(p));
	test_fill_seed(p, 100, 7);
	CHECK(uslab_realloc(p, 90) == p);            /* same class: in place */
	char *q = uslab_realloc(p, 5000);            /* grows: moved, content kept */
	REQUIRE(q && q != p);
	CHECK(test_intact_seed(q, 100, 7));
	CHECK(arena_owns(q));
	uslab_free(q);

	/* calloc of a reused block is zeroed too */
	char *z = uslab_malloc(256);
	test_fill(z, 256);
	uslab_free(z);
	char *c = uslab_calloc(16, 16);
	CHECK(c == z);
	CHECK(test_all_zero(c, 256));
	uslab_free(c);

	/* classes up to 64 KiB come from the arena too */
	char *big = uslab_malloc(40000);
	REQUIRE(big);
	CHECK(arena_owns(big));
	CHECK_EQ(uslab_malloc_usable_size(big), 40960);
	test_fill(big, 40960);
	CHECK(uslab_realloc(big, 30000) == big);     /* more than half: in place */
	CHECK(test_intact(big, 40960));
	uslab_free(big);
	char *huge = uslab_malloc(70000);            /* above 64 KiB: the class */
	REQUIRE(huge);
	CHECK(!arena_owns(huge) && ptr_to_slab(huge) && ptr_to_slab(huge)->kind == SLAB_KIND_SLAB);
	uslab_free(huge);

	/* alignment above 16: never the arena (its granule is 16) */
	void *a = uslab_memalign(64, 64);
	REQUIRE(a);
	CHECK(!arena_owns(a) && (uintptr_t)a % 64 == 0);
	uslab_free(a);
	void *b = uslab_aligned_alloc(4096, 40000);
	REQUIRE(b);
	CHECK(!arena_owns(b) && (uintptr_t)b % 4096 == 0);
	uslab_free(b);
	CHECK(kmalloc_arena_on);
}

/* The last block cut is uncut when freed; a freed block serves a request of
 * a class up to three below it (at most twice the size), with its own
 * usable size. */
static void check_uncut_and_reuse(void)
{
	/* classes from 6 KiB up: no earlier check used them, so their free
	 * lists are empty and what follows is exact */
	size_t cut0 = arena_cut_bytes();
	char *a = uslab_malloc(9000);   /* class 9216 */
	REQUIRE(arena_owns(a));
	CHECK_EQ(arena_cut_bytes(), cut0 + 9216);
	uslab_free(a);
	CHECK_EQ(arena_cut_bytes(), cut0);
	char *b = uslab_malloc(9000);
	CHECK(b == a);                  /* cut again at the same place */

	char *c = uslab_malloc(14000);  /* class 14336 */
	char *d = uslab_malloc(6000);   /* class 6144: c is no longer the last */
	REQUIRE(arena_owns(c) && arena_owns(d));
	uslab_free(c);                  /* onto the 14336 list */
	size_t cut1 = arena_cut_bytes();
	char *e = uslab_malloc(12000);  /* class 12288, the class below 14336 */
	CHECK(e == c);
	CHECK_EQ(uslab_malloc_usable_size(e), 14336);
	CHECK_EQ(arena_cut_bytes(), cut1);
	uslab_free(e);
	char *f = uslab_malloc(6500);   /* class 7168: five classes below, cut anew */
	CHECK(f != c);
	CHECK_EQ(uslab_malloc_usable_size(f), 7168);
	CHECK_EQ(arena_cut_bytes(), cut1 + 7168);
	uslab_free(f);                  /* the last: uncut */
	uslab_free(d);                  /* the last now: uncut */
	CHECK_EQ(arena_cut_bytes(), cut1 - 6144);
	char *g = uslab_malloc(14000);
	CHECK(g == c);
	uslab_free(g);                  /* the last again */
	CHECK_EQ(arena_cut_bytes(), cut0 + 9216);
	uslab_free(b);                  /* and so on down */
	CHECK_EQ(arena_cut_bytes(), cut0);
}

/* fn(p) in a child must abort with exactly "uslab: <call>(): <what> <p>". */
static void expect_fatal(void (*fn)(void *), void *p, const char *call, const char *what)
{
	char want[160];

	snprintf(want, sizeof(want), "uslab: %s(): %s %p\n", call, what, p);
	test_expect_abort(fn, p, want);
}

static void free_it(void *p) { uslab_free(p); }
static void usable_it(void *p) { (void)uslab_malloc_usable_size(p); }
static void double_free_it(void *p) { uslab_free(p); uslab_free(p); }
static void usable_after_free_it(void *p) { uslab_free(p); (void)uslab_malloc_usable_size(p); }

static void check_misuse(void)
{
	/* 80: a class no slab serves yet (malloc(64) now has a cpu slab from
	 * the memalign above, and its fast path takes it from there) */
	char *p = uslab_malloc(80);
	REQUIRE(arena_owns(p));
	expect_fatal(free_it, p + 16, "free", "invalid pointer");       /* interior */
	expect_fatal(free_it, p + 3, "free", "invalid pointer");        /* misaligned */
	char *q = uslab_malloc(20000);   /* class 20480: cut now, the last block */
	REQUIRE(arena_owns(q));
	expect_fatal(double_free_it, p, "free", "double free");
	/* the last block, uncut by its first free: its code stays for the
	 * second to find */
	expect_fatal(double_free_it, q, "free", "double free");
	uslab_free(q);
	/* cut again over two uncut blocks: the second one's code is gone, so
	 * a pointer to where it started is an interior one now */
	char *x = uslab_malloc(5000), *y = uslab_malloc(5000);
	REQUIRE(arena_owns(x) && arena_owns(y) && y > x);
	uslab_free(y);
	uslab_free(x);
	char *z = uslab_malloc(12000);
	CHECK(z == x);
	expect_fatal(free_it, y, "free", "invalid pointer");
	uslab_free(z);
	expect_fatal(usable_it, p + 32, "malloc_usable_size", "invalid pointer");
	expect_fatal(usable_after_free_it, p, "malloc_usable_size", "invalid pointer");
	/* past what was cut: never a block */
	expect_fatal(free_it, p + (256 << 10) - 4096 - ((uintptr_t)p % 4096), "free",
		     "invalid pointer");
	uslab_free(p);
	CHECK_EQ(kmalloc_validate_all(), 0);
}

/* In a child: 56 KiB blocks (a class whose cpu slab is empty: the 64 KiB
 * one has objects since the start-up classes served an aligned 40 KB block
 * from it) until the arena is used up; the request that does not fit ends
 * it and comes from the class's slab; slabs from then on. */
static void check_end_when_full(void)
{
	pid_t pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		void *b[16];
		unsigned n = 0, in = 0;
		while (n < 16) {
			b[n] = uslab_malloc(56 << 10);
			if (!b[n])
				_exit(2);
			if (!arena_owns(b[n++]))
				break;
			in++;
		}
		bool ok = !kmalloc_arena_on && in >= 1 && n == in + 1;
		void *s = uslab_malloc(64);
		ok = ok && s && !arena_owns(s) && ptr_to_slab(s) != NULL;
		for (unsigned i = 0; i < n; i++)
			uslab_free(b[i]);   /* arena blocks still free after the end */
		uslab_free(s);
		ok = ok && kmalloc_validate_all() == 0;
		if (!ok)
			fprintf(stderr, "end when full: %u blocks, %u in the arena, arena %s\n", n,
				in, kmalloc_arena_on ? "on" : "off");
		_exit(ok ? 0 : 1);
	}
	int status;
	REQUIRE(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static pthread_barrier_t second_barrier;
static void *second_block;

static void *second_thread(void *arg)
{
	(void)arg;
	pthread_barrier_wait(&second_barrier);   /* main allocates meanwhile */
	second_block = uslab_malloc(40);
	pthread_barrier_wait(&second_barrier);
	return NULL;
}

/* The arena serves one thread: a second thread's first request ends it (two
 * threads' blocks cut side by side would share cache lines), while a second
 * thread that has not allocated leaves it serving. In a child process. */
static void check_end_at_second_thread(void)
{
	pid_t pid = fork();

	REQUIRE(pid >= 0);
	if (pid == 0) {
		pthread_t th;
		void *a = uslab_malloc(40);
		bool ok = a && arena_owns(a);

		pthread_barrier_init(&second_barrier, NULL, 2);
		if (pthread_create(&th, NULL, second_thread, NULL))
			_exit(2);
		void *b = uslab_malloc(40);   /* two threads, one allocating */
		ok = ok && b && arena_owns(b) && kmalloc_arena_on;
		pthread_barrier_wait(&second_barrier);
		pthread_barrier_wait(&second_barrier);
		pthread_join(th, NULL);
		void *c = uslab_malloc(40);
		ok = ok && second_block && !arena_owns(second_block) && !kmalloc_arena_on &&
		     c && !arena_owns(c);
		uslab_free(a);
		uslab_free(b);
		uslab_free(c);
		uslab_free(second_block);
		ok = ok && kmalloc_validate_all() == 0 && arena_live_bytes() == 0;
		if (!ok)
			fprintf(stderr, "second thread: the arena %s, the second thread's block %s\n",
				kmalloc_arena_on ? "serves" : "ended",
				second_block && arena_owns(second_block) ? "in it" : "outside");
		_exit(ok ? 0 : 1);
	}
	int status;
	REQUIRE(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* ARENA_ALLOCS_MAX blocks end it, even when all are reused (a program
 * cycling one block must not stay on the slow path); blocks cut before the
 * end are freed into it afterwards, and not handed out again. */
static void check_end_after_count(void)
{
	void *keep = uslab_malloc(48);
	REQUIRE(arena_owns(keep));
	unsigned n = 0;
	while (kmalloc_arena_on && n < 20000) {
		void *p = uslab_malloc(32);
		REQUIRE(p);
		uslab_free(p);
		n++;
	}
	CHECK(!kmalloc_arena_on);
	CHECK(n < 16384);
	void *p = uslab_malloc(48);
	CHECK(!arena_owns(p) && ptr_to_slab(p) != NULL);
	uslab_free(keep);
	void *r = uslab_malloc(48);
	CHECK(r != keep);
	uslab_free(p);
	uslab_free(r);
	CHECK_EQ(kmalloc_validate_all(), 0);
}

/* The whole pages of the arena over [0, arena_cut) that are resident. */
static unsigned resident_pages(unsigned *whole)
{
	uintptr_t lo = ((uintptr_t)arena + 4095) & ~(uintptr_t)4095;
	uintptr_t hi = ((uintptr_t)arena + arena_cut_bytes()) & ~(uintptr_t)4095;
	unsigned char vec[ARENA_SIZE / 4096];
	unsigned n = 0;

	*whole = (unsigned)((hi - lo) / 4096);
	if (hi <= lo || mincore((void *)lo, hi - lo, vec))
		return 0;
	for (unsigned i = 0; i < *whole; i++)
		n += vec[i] & 1;
	return n;
}

/* Once the arena has ended, its pages that hold no live block go back to
 * the system (at the end, and as frees leave them idle), its statistics
 * count only what it holds, a live block keeps its page and its content,
 * and a freed block is still told from a double free. In a child process. */
static void check_pages_back_after_end(void)
{
	pid_t pid = fork();

	REQUIRE(pid >= 0);
	if (pid == 0) {
		enum { N = 600 };
		static char *b[N];
		void *big[8];
		unsigned nbig = 0, whole, k = N / 2;
		bool ok = kmalloc_arena_on;

		for (unsigned i = 0; i < N; i++) {   /* some 120 KiB, page after page */
			b[i] = uslab_malloc(200);
			ok = ok && b[i] && arena_owns(b[i]);
			if (b[i])
				memset(b[i], (int)(i & 0xff), 200);
		}
		/* keep one that crosses a page boundary: the page after holds
		 * no block start of a live block, only its tail */
		for (unsigned i = N / 2; i < N; i++)
			if (b[i] && (uintptr_t)b[i] / 4096 != ((uintptr_t)b[i] + 199) / 4096) {
				k = i;
				break;
			}
		ok = ok && (uintptr_t)b[k] / 4096 != ((uintptr_t)b[k] + 199) / 4096;
		for (unsigned i = 0; i < N; i++)
			if (i != k)
				uslab_free(b[i]);
		ok = ok && resident_pages(&whole) > 16;   /* freed, still held */
		while (kmalloc_arena_on && nbig < 8) {    /* big blocks end it */
			void *q = uslab_malloc(60000);

			if (q && arena_owns(q))
				memset(q, 1, 60000);
			big[nbig++] = q;
		}
		ok = ok && !kmalloc_arena_on;
		for (unsigned i = 0; i < nbig; i++)
			uslab_free(big[i]);
		unsigned res = resident_pages(&whole);
		size_t held = arena_held_bytes();
		/* block k's two pages, nothing else; its bytes as written */
		ok = ok && whole > 16 && res == 2;
		ok = ok && held < arena_cut_bytes() && held <= 4 * 4096;
		for (unsigned j = 0; j < 200; j++)
			ok = ok && (unsigned char)b[k][j] == (k & 0xff);
		uslab_free(b[k]);
		unsigned res2 = resident_pages(&whole);
		ok = ok && res2 == 0 && arena_held_bytes() < held && arena_live_bytes() == 0;
		ok = ok && kmalloc_validate_all() == 0;
		if (!ok)
			fprintf(stderr, "pages back: %u of %u whole pages resident, then %u; held %zu of %zu cut\n",
				res, whole, res2, held, arena_cut_bytes());
		_exit(ok ? 0 : 1);
	}
	int status;
	REQUIRE(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* A block freed twice after the arena has ended (its page gone back, its
 * code kept in the map) is reported as a double free. */
static void free_twice_after_end(void *p)
{
	/* 48 KiB blocks, kept, until the arena is full (a class no earlier
	 * check took a slab of: its requests come to the arena) */
	for (unsigned n = 0; kmalloc_arena_on && n < ARENA_SIZE / (48 << 10) + 1; n++)
		REQUIRE(uslab_malloc(48 << 10) != NULL);
	CHECK(!kmalloc_arena_on);
	uslab_free(p);
	uslab_free(p);
}

int main(void)
{
	check_first_blocks();
	check_api();
	check_uncut_and_reuse();
	check_misuse();
	check_end_when_full();
	check_end_at_second_thread();
	check_pages_back_after_end();
	void *blk = uslab_malloc(100);
	REQUIRE(arena_owns(blk));
	expect_fatal(free_twice_after_end, blk, "free", "double free");
	uslab_free(blk);
	check_end_after_count();
	return test_done("arena_unit");
}
