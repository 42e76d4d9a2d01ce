/*
 * slab_transitions_unit - every slab state transition, one deterministic step
 * at a time, checked on the slab's coupled word (docs/slab.md, "Transitions").
 *
 * The "other thread" is a puppet: a long-lived thread that runs one job at a
 * time on request and keeps its heap (and so its cpu-partial list) between
 * jobs, so the main thread can look at what a remote free left behind. Where
 * a thread's exit matters, a short thread is created and joined instead.
 * Every hand-off goes through a mutex or a join: nothing depends on timing.
 *
 * The caches under test serve 256-byte objects: 64 per one-unit slab, and a
 * fresh slab hands its objects out in address order, so objs[s * 64 + i] is
 * object i of the s-th slab a thread made.
 */
#include "test.h"
#include "uslab.h"
#include "kmalloc.h"
#include "options.h"

#include <pthread.h>
#include <stdbool.h>

#define OBJ_SIZE 256
#define PER      64          /* objects per slab at OBJ_SIZE */
#define PAGE_OBJS 16         /* objects a new slab builds first (those in its first 4 KiB page) */

/* ---- the puppet thread and short-lived threads ------------------------------------- */

struct puppet {
	pthread_t tid;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	void (*fn)(void *);
	void *arg;
	bool posted, quit;
};

static void *puppet_main(void *arg)
{
	struct puppet *p = arg;

	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->posted && !p->quit)
			pthread_cond_wait(&p->cv, &p->mu);
		if (!p->posted)
			break;
		pthread_mutex_unlock(&p->mu);
		p->fn(p->arg);
		pthread_mutex_lock(&p->mu);
		p->posted = false;
		pthread_cond_broadcast(&p->cv);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

static void puppet_start(struct puppet *p)
{
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	p->posted = p->quit = false;
	REQUIRE(pthread_create(&p->tid, NULL, puppet_main, p) == 0);
}

/* Run fn(arg) on the puppet and wait until it is done. */
static void puppet_run(struct puppet *p, void (*fn)(void *), void *arg)
{
	pthread_mutex_lock(&p->mu);
	p->fn = fn;
	p->arg = arg;
	p->posted = true;
	pthread_cond_broadcast(&p->cv);
	while (p->posted)
		pthread_cond_wait(&p->cv, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

static void puppet_stop(struct puppet *p)
{
	pthread_mutex_lock(&p->mu);
	p->quit = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	pthread_join(p->tid, NULL);
}

struct oneshot {
	void (*fn)(void *);
	void *arg;
};

static void *oneshot_main(void *arg)
{
	struct oneshot *o = arg;

	o->fn(o->arg);
	return NULL;
}

/* Run fn(arg) on a fresh thread and join it: its exit flush has run. */
static void run_in_thread(void (*fn)(void *), void *arg)
{
	struct oneshot o = { fn, arg };
	pthread_t t;

	REQUIRE(pthread_create(&t, NULL, oneshot_main, &o) == 0);
	pthread_join(t, NULL);
}

static struct puppet other;

/* ---- jobs for another thread --------------------------------------------------------- */

struct job {
	struct uslab_cache *c;
	void **objs;
	size_t n;
	unsigned live;             /* make_partial: objects left live per slab */
	struct cpu_slab snap;      /* the thread's cpu slab after the job */
	unsigned private_len;      /* length of its private freelist then */
	struct thread_heap *heap;  /* the thread's heap */
};

static unsigned chain_len(const struct uslab_cache *c, void *p)
{
	unsigned n = 0;

	for (; p && n <= CTR_OBJ_MASK; p = fp_get(c, p))
		n++;
	return n;
}

static void snap_cpu(struct job *j)
{
	struct cpu_slab *cs = this_cpu_slab(j->c);

	j->snap = *cs;
	j->private_len = chain_len(j->c, cs->freelist);
	j->heap = tls_heap;
}

static bool on_cpu_partial(const struct cpu_slab *cs, const struct slab *slab)
{
	for (struct slab *p = cs->partial; p; p = p->next)
		if (p == slab)
			return true;
	return false;
}

static void job_free(void *arg)
{
	struct job *j = arg;

	for (size_t i = 0; i < j->n; i++)
		uslab_cache_free(j->c, j->objs[i]);
	snap_cpu(j);
}

static void job_free_bulk(void *arg)
{
	struct job *j = arg;

	uslab_cache_free_bulk(j->c, j->n, j->objs);
	snap_cpu(j);
}

static void job_alloc(void *arg)
{
	struct job *j = arg;

	for (size_t i = 0; i < j->n; i++)
		REQUIRE((j->objs[i] = uslab_cache_alloc(j->c)) != NULL);
	snap_cpu(j);
}

static void job_flush(void *arg)
{
	struct job *j = arg;

	uslab_thread_flush();
	snap_cpu(j);
}

/*
 * A slab whose last object the owner allocated stays frozen at the tail of
 * its cpu-partial list (dry), so that the owner's frees into it stay local;
 * it goes FULL when that list is drained. Tests that want FULL slabs drain
 * the calling thread's list, leaving its active slab alone.
 */
static void make_dry_full(struct uslab_cache *c)
{
	cache_drain_cpu_partial(c);
}

static unsigned long nr_partial(struct uslab_cache *c)
{
	lock_ranked(&c->list_lock, RANK_LIST);
	unsigned long n = c->nr_partial;
	unlock_ranked(&c->list_lock, RANK_LIST);
	return n;
}

/*
 * j->n fresh slabs, each left PARTIAL with its first j->live objects live:
 * j->objs[s * PER + i] for i < live stay allocated, the others are freed.
 * The calling thread ends with no slab of the cache. Needs an empty list.
 */
static void job_make_partial(void *arg)
{
	struct job *j = arg;
	struct uslab_cache *c = j->c;

	REQUIRE(nr_partial(c) == 0 && this_cpu_slab(c)->slab == NULL);
	REQUIRE(c->objects == PER && j->live > 0 && j->live < PER);
	for (size_t i = 0; i < j->n * PER; i++)
		REQUIRE((j->objs[i] = uslab_cache_alloc(c)) != NULL);
	for (size_t s = 0; s < j->n; s++) {
		REQUIRE((uintptr_t)j->objs[s * PER] == ptr_to_slab(j->objs[s * PER])->base);
		for (unsigned i = j->live; i < PER; i++) {
			REQUIRE(ptr_to_slab(j->objs[s * PER + i]) == ptr_to_slab(j->objs[s * PER]));
			uslab_cache_free(c, j->objs[s * PER + i]);
			j->objs[s * PER + i] = NULL;
		}
	}
	uslab_thread_flush();
	snap_cpu(j);
}

static struct job *other_do(void (*fn)(void *), struct uslab_cache *c, void **objs, size_t n)
{
	static struct job j;

	j = (struct job){ .c = c, .objs = objs, .n = n };
	puppet_run(&other, fn, &j);
	return &j;
}

static struct job *other_make_partial(struct uslab_cache *c, void **objs, size_t k,
				      unsigned live)
{
	static struct job j;

	j = (struct job){ .c = c, .objs = objs, .n = k, .live = live };
	puppet_run(&other, job_make_partial, &j);
	return &j;
}

/* ---- looking at a slab -------------------------------------------------------------- */

struct word {
	struct slab *slab;
	void *freelist;
	unsigned inuse, objects;
	bool frozen, on_partial;
};

static struct word word_of(const void *obj)
{
	struct word w = { .slab = ptr_to_slab(obj) };

	REQUIRE(w.slab != NULL);
	dword_t d = dwcas_read_stable(&w.slab->xword);
	w.freelist = (void *)d.lo;
	w.inuse = ctr_inuse(d.hi);
	w.objects = ctr_objects(d.hi);
	w.frozen = ctr_frozen(d.hi);
	w.on_partial = READ_ONCE(w.slab->on_partial);
	return w;
}

static struct uslab_cache_info info_of(struct uslab_cache *c)
{
	struct uslab_cache_info info;

	REQUIRE(uslab_cache_info(c, &info) == 0);
	return info;
}

/*
 * uslab_cache_info's live count while another thread holds `held` free
 * objects privately (its cpu freelist or an owner-local list): exact, or
 * with those counted as live, since info need not read another thread's
 * private lists. Both are exact once that thread flushes.
 */
static void check_live(struct uslab_cache *c, size_t exact, size_t held, int line)
{
	size_t live = info_of(c).live_objects;

	if (live != exact && live != exact + held) {
		fprintf(stderr, "%s:%d: live_objects %zu, want %zu (or %zu)\n", __FILE__, line, live,
			exact, exact + held);
		test_failures++;
	}
}
#define CHECK_LIVE(c, exact, held) check_live(c, exact, held, __LINE__)

/* USLAB_REMOTE_IMMEDIATE: a remote free here is the one dwcas whose effect
 * the steps check (without it, frees of objects another thread owns go to it
 * by message; test_remote_frees_by_message covers that) */
static struct uslab_cache *new_cache(const char *name)
{
	struct uslab_cache *c = uslab_cache_create(name, OBJ_SIZE, 0, USLAB_REMOTE_IMMEDIATE, NULL);

	REQUIRE(c != NULL);
	REQUIRE(c->objects == PER && os_page_size() == PAGE_OBJS * OBJ_SIZE);
	REQUIRE(c->cpu_partial >= 2 && c->min_partial >= 2 && c->min_partial <= 15);
	c->cpu_partial = 8;   /* the overflow steps below fill the list: keep it short */
	return c;
}

/* USLAB_CPU_PARTIAL: a count, at most CPU_PARTIAL_MAX (the list's length
 * is 16 bits); 0 is the default by bytes. */
static void test_cpu_partial_option(void)
{
	struct uslab_cache *c;

	options_parse_entry("USLAB_CPU_PARTIAL=7");
	c = uslab_cache_create("t-cp-7", OBJ_SIZE, 0, 0, NULL);
	CHECK(c && c->cpu_partial == 7);
	uslab_cache_destroy(c);
	options_parse_entry("USLAB_CPU_PARTIAL=100000");
	c = uslab_cache_create("t-cp-big", OBJ_SIZE, 0, 0, NULL);
	CHECK(c && c->cpu_partial == CPU_PARTIAL_MAX);
	uslab_cache_destroy(c);
	options_parse_entry("USLAB_CPU_PARTIAL=0");
	c = uslab_cache_create("t-cp-0", OBJ_SIZE, 0, 0, NULL);
	CHECK(c && c->cpu_partial == cpu_partial_slabs(c, CPU_PARTIAL_BYTES));
	uslab_cache_destroy(c);
}

/* Free what is left (NULLs skipped), flush both threads, check, destroy. */
static void finish(struct uslab_cache *c, void **objs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		uslab_cache_free(c, objs[i]);
	uslab_thread_flush();
	other_do(job_flush, c, NULL, 0);
	CHECK_EQ(uslab_cache_validate(c), 0);
	struct uslab_cache_info info = info_of(c);
	CHECK_EQ(info.live_objects, 0);
	CHECK_EQ(info.slabs, info.partial_slabs);          /* only EMPTY slabs remain */
	CHECK(info.partial_slabs <= c->min_partial);
	CHECK_EQ(info.slabs_allocated - info.slabs_freed, info.slabs);
	CHECK_EQ(uslab_cache_destroy(c), 0);
}

/* ---- new -> FROZEN; remote free into the active slab; refill; exhaustion ----------------- */

static void test_new_slab_is_frozen(void)
{
	struct uslab_cache *c = new_cache("t-new");
	void *x = uslab_cache_alloc(c);
	struct word w = word_of(x);
	struct cpu_slab *cs = this_cpu_slab(c);

	CHECK((uintptr_t)x == w.slab->base);
	CHECK(w.frozen);
	CHECK(w.freelist == NULL);                 /* every object went private */
	CHECK_EQ(w.inuse, PER);
	CHECK_EQ(w.objects, PER);
	CHECK(!w.on_partial);
	CHECK(cs->slab == w.slab);
	/* built so far: the objects that start in the first page */
	CHECK_EQ(w.slab->built, PAGE_OBJS);
	CHECK(cs->freelist == (char *)x + c->stride);
	CHECK_EQ(chain_len(c, cs->freelist), PAGE_OBJS - 1);
	CHECK_EQ(uslab_cache_validate(c), 0);
	/* the next object starts the second build: as many again */
	void *first_page[PAGE_OBJS];
	first_page[0] = x;
	for (int i = 1; i < PAGE_OBJS; i++)
		first_page[i] = uslab_cache_alloc(c);
	CHECK_EQ(w.slab->built, PAGE_OBJS);
	void *y = uslab_cache_alloc(c);
	CHECK(y == (char *)x + PAGE_OBJS * c->stride);
	CHECK_EQ(w.slab->built, 2 * PAGE_OBJS);
	CHECK_EQ(chain_len(c, cs->freelist), PAGE_OBJS - 1);
	CHECK_EQ(uslab_cache_validate(c), 0);
	uslab_cache_free(c, y);
	for (int i = PAGE_OBJS - 1; i > 0; i--)
		uslab_cache_free(c, first_page[i]);
	CHECK_EQ(info_of(c).slabs, 1);
	CHECK_EQ(info_of(c).slabs_allocated, 1);
	CHECK_EQ(info_of(c).live_objects, 1);
	CHECK_EQ(uslab_cache_validate(c), 0);
	finish(c, &x, 1);
}

struct free_arg {
	struct uslab_cache *c;
	void **objs;
	size_t n;
};

static void thread_free(void *arg)
{
	struct free_arg *a = arg;

	for (size_t i = 0; i < a->n; i++)
		uslab_cache_free(a->c, a->objs[i]);
}

/*
 * FROZEN -> FROZEN (#2, #3): the owner's private list is exhausted; another
 * thread frees three objects of the active slab; the owner's next allocation
 * (the refill) takes exactly that chain, newest first. Then FROZEN -> FULL
 * (#5) when the slab has nothing left.
 */
static void test_remote_free_while_owner_refills(void)
{
	struct uslab_cache *c = new_cache("t-refill");
	void *objs[PER], *back[3];

	for (unsigned i = 0; i < PER; i++)
		objs[i] = uslab_cache_alloc(c);
	struct slab *slab = ptr_to_slab(objs[0]);
	struct cpu_slab *cs = this_cpu_slab(c);
	CHECK(cs->slab == slab && cs->freelist == NULL);   /* exhausted, still active */
	CHECK(word_of(objs[0]).frozen);

	void *gone[3] = { objs[3], objs[5], objs[7] };
	struct free_arg a = { c, gone, 3 };
	run_in_thread(thread_free, &a);

	struct word w = word_of(objs[0]);
	CHECK(w.frozen);                             /* FROZEN stays FROZEN */
	CHECK(!w.on_partial);
	CHECK_EQ(w.inuse, PER - 3);
	CHECK(w.freelist == objs[7]);
	CHECK(fp_get(c, objs[7]) == objs[5] && fp_get(c, objs[5]) == objs[3]);
	CHECK(fp_get(c, objs[3]) == NULL);
	CHECK_EQ(nr_partial(c), 0);
	CHECK(cs->slab == slab && cs->freelist == NULL);
	CHECK_EQ(info_of(c).live_objects, PER - 3);
	CHECK_EQ(uslab_cache_validate(c), 0);

	/* the refill takes the remote chain */
	for (int i = 0; i < 3; i++)
		back[i] = uslab_cache_alloc(c);
	CHECK(back[0] == objs[7] && back[1] == objs[5] && back[2] == objs[3]);
	w = word_of(objs[0]);
	CHECK(w.frozen && w.freelist == NULL);
	CHECK_EQ(w.inuse, PER);
	CHECK(cs->slab == slab && cs->freelist == NULL);
	CHECK_EQ(uslab_cache_validate(c), 0);

	/* nothing left anywhere: the owner gives the slab up FULL */
	void *next = uslab_cache_alloc(c);
	make_dry_full(c);
	CHECK(ptr_to_slab(next) != slab);
	w = word_of(objs[0]);
	CHECK(!w.frozen && !w.on_partial && w.freelist == NULL);
	CHECK_EQ(w.inuse, PER);
	CHECK_EQ(nr_partial(c), 0);
	CHECK(cs->slab == ptr_to_slab(next));
	CHECK_EQ(uslab_cache_validate(c), 0);

	uslab_cache_free(c, next);
	finish(c, objs, PER);
}

/* ---- FROZEN -> PARTIAL / FULL / EMPTY by uslab_thread_flush ------------------------------ */

static void test_flush_to_partial(void)
{
	struct uslab_cache *c = new_cache("t-flush-partial");
	void *objs[10];

	for (int i = 0; i < 10; i++)
		objs[i] = uslab_cache_alloc(c);
	uslab_thread_flush();
	struct word w = word_of(objs[0]);
	CHECK(!w.frozen && w.on_partial);
	CHECK_EQ(w.inuse, 10);
	/* the private chain spliced, the objects not built yet built first */
	CHECK_EQ(w.slab->built, PER);
	CHECK(w.freelist == (char *)objs[0] + PAGE_OBJS * c->stride);
	CHECK_EQ(chain_len(c, w.freelist), PER - 10);
	CHECK_EQ(nr_partial(c), 1);
	CHECK(this_cpu_slab(c)->slab == NULL && this_cpu_slab(c)->freelist == NULL);
	CHECK_EQ(info_of(c).live_objects, 10);
	CHECK_EQ(info_of(c).partial_slabs, 1);
	CHECK_EQ(uslab_cache_validate(c), 0);
	finish(c, objs, 10);
}

static void test_flush_to_full(void)
{
	struct uslab_cache *c = new_cache("t-flush-full");
	void *objs[PER];

	for (unsigned i = 0; i < PER; i++)
		objs[i] = uslab_cache_alloc(c);
	uslab_thread_flush();
	struct word w = word_of(objs[0]);
	CHECK(!w.frozen && !w.on_partial);
	CHECK(w.freelist == NULL);
	CHECK_EQ(w.inuse, PER);
	CHECK_EQ(nr_partial(c), 0);
	CHECK_EQ(uslab_cache_validate(c), 0);
	finish(c, objs, PER);
}

/* Remote frees arrive after the owner's private list ran dry; the owner then
 * deactivates with an empty private chain and the shared list makes it PARTIAL. */
static void test_flush_exhausted_with_remote_frees(void)
{
	struct uslab_cache *c = new_cache("t-flush-remote");
	void *objs[PER];

	for (unsigned i = 0; i < PER; i++)
		objs[i] = uslab_cache_alloc(c);
	struct job *j = other_do(job_free, c, &objs[10], 2);
	CHECK(j->snap.partial == NULL && j->snap.nr_partial == 0);   /* frozen: not taken */
	uslab_thread_flush();
	struct word w = word_of(objs[0]);
	CHECK(!w.frozen && w.on_partial);
	CHECK_EQ(w.inuse, PER - 2);
	CHECK(w.freelist == objs[11]);
	CHECK_EQ(nr_partial(c), 1);
	CHECK_EQ(uslab_cache_validate(c), 0);
	objs[10] = objs[11] = NULL;
	finish(c, objs, PER);
}

static void test_flush_to_empty_kept(void)
{
	struct uslab_cache *c = new_cache("t-flush-empty-kept");
	static void *objs[PER];

	for (unsigned i = 0; i < PER; i++)          /* every object built */
		objs[i] = uslab_cache_alloc(c);
	void *x = objs[0];
	struct slab *slab = ptr_to_slab(x);

	CHECK_EQ(slab->built, PER);
	for (unsigned i = 0; i < PER; i++)          /* fast path: back on the private list */
		uslab_cache_free(c, objs[i]);
	uslab_thread_flush();
	struct word w = word_of(x);
	CHECK(w.slab == slab);
	CHECK(!w.frozen && w.on_partial);
	CHECK_EQ(w.inuse, 0);
	CHECK_EQ(chain_len(c, w.freelist), PER);
	CHECK_EQ(nr_partial(c), 1);
	struct uslab_cache_info info = info_of(c);
	CHECK_EQ(info.slabs, 1);
	CHECK_EQ(info.slabs_freed, 0);
	CHECK_EQ(info.live_objects, 0);
	CHECK_EQ(uslab_cache_validate(c), 0);
	finish(c, NULL, 0);
}

/* EMPTY at deactivation with objects never built: discarded, whatever the
 * partial list holds, and not built first - the pages of its unbuilt
 * objects are never written (slab_release_unbuilt). */
static void test_flush_unbuilt_empty_discarded(void)
{
	struct uslab_cache *c = new_cache("t-flush-unbuilt");
	void *x = uslab_cache_alloc(c), *y = uslab_cache_alloc(c);
	struct slab *slab = ptr_to_slab(x);
	struct uslab_cache_info before = info_of(c);

	CHECK_EQ(slab->built, PAGE_OBJS);
	CHECK_EQ(nr_partial(c), 0);
	uslab_cache_free(c, x);
	uslab_cache_free(c, y);
	uslab_thread_flush();
	struct uslab_cache_info after = info_of(c);
	CHECK_EQ(after.slabs_freed, before.slabs_freed + 1);
	CHECK_EQ(after.slabs, 0);
	CHECK_EQ(nr_partial(c), 0);
	CHECK(ptr_to_slab(x) == NULL);               /* its units went back */
	CHECK_EQ(uslab_cache_validate(c), 0);
	finish(c, NULL, 0);
}

/* The same with one object still out: built, and PARTIAL on the list. */
static void test_flush_unbuilt_partial(void)
{
	struct uslab_cache *c = new_cache("t-flush-unbuilt-partial");
	void *x = uslab_cache_alloc(c), *y = uslab_cache_alloc(c);
	struct slab *slab = ptr_to_slab(x);

	uslab_cache_free(c, x);
	uslab_thread_flush();
	struct word w = word_of(y);
	CHECK(w.slab == slab && !w.frozen && w.on_partial);
	CHECK_EQ(w.inuse, 1);
	CHECK_EQ(slab->built, PER);
	CHECK_EQ(chain_len(c, w.freelist), PER - 1);
	CHECK_EQ(uslab_cache_validate(c), 0);
	finish(c, &y, 1);
}

/* EMPTY at deactivation with min_partial slabs already listed: discarded. */
static void test_flush_to_empty_discarded(void)
{
	struct uslab_cache *c = new_cache("t-flush-empty-gone");
	static void *objs[16 * PER], *mine[PER];

	for (unsigned i = 0; i < PER; i++)          /* our active slab, made first, built */
		mine[i] = uslab_cache_alloc(c);
	void *x = mine[0];
	struct slab *slab = ptr_to_slab(x);

	other_make_partial(c, objs, c->min_partial, 1);
	CHECK_EQ(nr_partial(c), c->min_partial);
	CHECK(!word_of(x).on_partial && word_of(x).frozen);
	CHECK_EQ(uslab_cache_validate(c), 0);
	struct uslab_cache_info before = info_of(c);

	for (unsigned i = 0; i < PER; i++)
		uslab_cache_free(c, mine[i]);
	uslab_thread_flush();
	struct uslab_cache_info after = info_of(c);
	CHECK_EQ(after.slabs_freed, before.slabs_freed + 1);
	CHECK_EQ(after.slabs, before.slabs - 1);
	CHECK_EQ(nr_partial(c), c->min_partial);
	CHECK(ptr_to_slab(x) == NULL);               /* its units went back */
	for (unsigned s = 0; s < c->min_partial; s++)
		CHECK(word_of(objs[s * PER]).on_partial && word_of(objs[s * PER]).slab != slab);
	CHECK_EQ(uslab_cache_validate(c), 0);
	finish(c, objs, c->min_partial * PER);
}

/* ---- FULL -> FROZEN on the freeing thread's cpu-partial list (#8) ------------------------ */

static void test_full_remote_free_freezes(void)
{
	struct uslab_cache *c = new_cache("t-full-freeze");
	static void *objs[2 * PER];
	void *mine[2];

	for (unsigned i = 0; i < 2 * PER; i++)
		objs[i] = uslab_cache_alloc(c);       /* slab A FULL, slab B active and dry */
	make_dry_full(c);
	struct slab *a = ptr_to_slab(objs[0]);
	struct word w = word_of(objs[0]);
	CHECK(!w.frozen && !w.on_partial && w.freelist == NULL);
	CHECK_EQ(w.inuse, PER);

	struct job *j = other_do(job_free, c, &objs[5], 1);
	w = word_of(objs[0]);
	CHECK(w.frozen && !w.on_partial);
	CHECK_EQ(w.inuse, PER - 1);
	CHECK(w.freelist == objs[5]);
	CHECK(j->snap.slab == NULL);
	CHECK(j->snap.partial == a && j->snap.nr_partial == 1);
	CHECK(a->owner == j->heap && a->local_free == NULL);
	CHECK_EQ(nr_partial(c), 0);
	CHECK_EQ(uslab_cache_validate(c), 0);

	/* a free by a third party leaves it frozen for its owner */
	uslab_cache_free(c, objs[6]);
	w = word_of(objs[0]);
	CHECK(w.frozen && w.freelist == objs[6]);
	CHECK_EQ(w.inuse, PER - 2);
	CHECK(this_cpu_slab(c)->partial == NULL && this_cpu_slab(c)->nr_partial == 0);
	CHECK_EQ(uslab_cache_validate(c), 0);

	/* the owner activates it from its cpu-partial list and takes the chain */
	j = other_do(job_alloc, c, mine, 2);
	CHECK(mine[0] == objs[6] && mine[1] == objs[5]);
	CHECK(j->snap.slab == a && j->snap.partial == NULL && j->snap.nr_partial == 0);
	CHECK(j->snap.freelist == NULL);
	w = word_of(objs[0]);
	CHECK(w.frozen && w.freelist == NULL);
	CHECK_EQ(w.inuse, PER);
	CHECK_EQ(uslab_cache_validate(c), 0);

	other_do(job_free, c, mine, 2);               /* its fast path: private list */
	objs[5] = objs[6] = NULL;
	finish(c, objs, 2 * PER);
}

/*
 * A thread's frees into a slab it froze but is not allocating from (its
 * cpu-partial slab) go to the slab's owner-local list: the word does not
 * change. Activation takes the local list first, then the shared one; a
 * flush splices an untaken local list back into the word.
 */
static void test_owner_local_frees(void)
{
	struct uslab_cache *c = new_cache("t-owner-local");
	static void *objs[3 * PER];
	void *got[4];

	for (unsigned i = 0; i < 3 * PER; i++)
		objs[i] = uslab_cache_alloc(c);       /* A, B FULL; C active and dry */
	make_dry_full(c);
	other_do(job_free, c, &objs[0], 1);           /* A frozen for the other thread */
	struct slab *a = ptr_to_slab(objs[0]);
	struct word w0 = word_of(objs[0]);
	CHECK(w0.frozen && w0.freelist == objs[0]);

	struct job *j = other_do(job_free, c, &objs[1], 2);   /* its local frees */
	struct word w = word_of(objs[0]);
	CHECK(w.frozen && w.freelist == objs[0]);
	CHECK_EQ(w.inuse, w0.inuse);                 /* the word did not move */
	CHECK(a->local_free == objs[2] && fp_get(c, objs[2]) == objs[1]);
	CHECK(j->snap.partial == a);
	uslab_cache_free(c, objs[3]);                 /* ours is a remote free: shared */
	w = word_of(objs[0]);
	CHECK(w.freelist == objs[3]);
	CHECK_EQ(w.inuse, w0.inuse - 1);
	CHECK_LIVE(c, 3 * PER - 4, 2);
	CHECK_EQ(uslab_cache_validate(c), 0);

	/* activation: the local list first (2), then the shared list (2) */
	j = other_do(job_alloc, c, got, 4);
	CHECK(got[0] == objs[2] && got[1] == objs[1]);
	CHECK(got[2] == objs[3] && got[3] == objs[0]);
	CHECK(j->snap.slab == a && a->local_free == NULL);
	CHECK_EQ(uslab_cache_validate(c), 0);
	other_do(job_free, c, got, 4);                /* fast path: private list */
	objs[0] = objs[1] = objs[2] = objs[3] = NULL;

	/* a flush splices an owner-local list back: B frozen for the other
	 * thread with one shared and two local frees, then released PARTIAL */
	other_do(job_free, c, &objs[PER], 3);
	CHECK(word_of(objs[PER]).frozen);
	CHECK_EQ(chain_len(c, ptr_to_slab(objs[PER])->local_free), 2);
	other_do(job_flush, c, NULL, 0);
	w = word_of(objs[PER]);
	CHECK(!w.frozen && w.on_partial);
	CHECK_EQ(w.inuse, PER - 3);
	CHECK_EQ(chain_len(c, w.freelist), 3);
	CHECK(w.slab->owner == NULL && w.slab->local_free == NULL);
	CHECK_EQ(uslab_cache_validate(c), 0);
	objs[PER] = objs[PER + 1] = objs[PER + 2] = NULL;
	finish(c, objs, 3 * PER);
}

/* FULL -> PARTIAL (#9) and FULL -> EMPTY for a freer that cannot own slabs:
 * __slab_free with can_freeze = false, as the slow path calls it without a heap. */
static void test_full_remote_free_without_heap(void)
{
	struct uslab_cache *c = new_cache("t-full-noheap");
	static void *objs[3 * PER];

	for (unsigned i = 0; i < 3 * PER; i++)
		objs[i] = uslab_cache_alloc(c);       /* A, B FULL; C active and dry */
	make_dry_full(c);
	struct slab *a = ptr_to_slab(objs[0]), *b = ptr_to_slab(objs[PER]);

	CHECK(!__slab_free(c, a, objs[0], objs[0], 1, false));
	struct word w = word_of(objs[0]);
	CHECK(!w.frozen && w.on_partial && w.freelist == objs[0]);
	CHECK_EQ(w.inuse, PER - 1);
	CHECK_EQ(nr_partial(c), 1);
	CHECK_EQ(uslab_cache_validate(c), 0);
	objs[0] = NULL;

	/* all of B in one chain: FULL -> EMPTY, kept (the list is short) */
	void **bo = &objs[PER];
	for (unsigned i = 1; i < PER; i++)
		fp_set(c, bo[i], bo[i - 1]);
	CHECK(!__slab_free(c, b, bo[PER - 1], bo[0], PER, false));
	w = word_of(objs[PER]);
	CHECK(!w.frozen && w.on_partial && w.freelist == bo[PER - 1]);
	CHECK_EQ(w.inuse, 0);
	CHECK_EQ(chain_len(c, w.freelist), PER);
	CHECK_EQ(nr_partial(c), 2);
	CHECK_EQ(uslab_cache_validate(c), 0);
	for (unsigned i = 0; i < PER; i++)
		bo[i] = NULL;
	finish(c, objs, 3 * PER);
}

/*
 * Where a slab joins the partial list: at the head, unless less than a
 * sixteenth of it is free (slab.c, PARTIAL_TAIL_SHARE): then at the tail,
 * behind the slabs a refill gets more from. Three FULL slabs take remote
 * frees from a thread without a heap: A one object (head: the list is
 * empty), B one (tail), C half of it (head): the list reads C, A, B, and a
 * refill takes C.
 */
static void test_partial_list_order(void)
{
	struct uslab_cache *c = new_cache("t-partial-order");
	static void *objs[4 * PER];

	for (unsigned i = 0; i < 4 * PER; i++)
		objs[i] = uslab_cache_alloc(c);       /* A, B, C FULL; D active and dry */
	make_dry_full(c);
	struct slab *a = ptr_to_slab(objs[0]), *b = ptr_to_slab(objs[PER]),
		    *cs = ptr_to_slab(objs[2 * PER]);

	CHECK(!__slab_free(c, a, objs[0], objs[0], 1, false));
	CHECK(!__slab_free(c, b, objs[PER], objs[PER], 1, false));
	void **co = &objs[2 * PER];
	for (unsigned i = 1; i < PER / 2; i++)
		fp_set(c, co[i], co[i - 1]);
	CHECK(!__slab_free(c, cs, co[PER / 2 - 1], co[0], PER / 2, false));
	objs[0] = objs[PER] = NULL;
	for (unsigned i = 0; i < PER / 2; i++)
		co[i] = NULL;

	lock_ranked(&c->list_lock, RANK_LIST);
	CHECK(c->partial == cs && cs->next == a && a->next == b && !b->next);
	CHECK(c->partial_tail == b && b->prev == a && a->prev == cs && !cs->prev);
	unlock_ranked(&c->list_lock, RANK_LIST);
	CHECK_EQ(uslab_cache_validate(c), 0);

	/* a refill takes C, with its half; given back, C is at the head again
	 * and B still the tail */
	void *chain, *tail;
	unsigned n;
	CHECK(partial_take(c, &chain, UINT_MAX, &n) == cs);
	CHECK_EQ(n, PER / 2);
	CHECK(c->partial == a && c->partial_tail == b && !a->prev);
	for (tail = chain; fp_get(c, tail); tail = fp_get(c, tail))
		;
	slab_unfreeze(c, cs, chain, tail, n);
	lock_ranked(&c->list_lock, RANK_LIST);
	CHECK(c->partial == cs && cs->next == a && c->partial_tail == b);
	unlock_ranked(&c->list_lock, RANK_LIST);
	CHECK_EQ(uslab_cache_validate(c), 0);
	finish(c, objs, 4 * PER);
}

/* A bulk free of a whole FULL slab: one dwcas freezes it with nothing in use;
 * the freer's flush then makes it EMPTY and keeps it. */
static void test_bulk_free_full_slab(void)
{
	struct uslab_cache *c = new_cache("t-bulk-full");
	static void *objs[2 * PER];

	for (unsigned i = 0; i < 2 * PER; i++)
		objs[i] = uslab_cache_alloc(c);
	make_dry_full(c);
	struct slab *a = ptr_to_slab(objs[0]);

	struct job *j = other_do(job_free_bulk, c, objs, PER);
	struct word w = word_of(objs[0]);
	CHECK(w.frozen && !w.on_partial);
	CHECK_EQ(w.inuse, 0);
	CHECK(w.freelist == objs[PER - 1]);
	CHECK_EQ(chain_len(c, w.freelist), PER);
	CHECK(j->snap.partial == a && j->snap.nr_partial == 1);
	CHECK_EQ(uslab_cache_validate(c), 0);

	other_do(job_flush, c, NULL, 0);
	w = word_of(objs[0]);
	CHECK(!w.frozen && w.on_partial);
	CHECK_EQ(w.inuse, 0);
	CHECK_EQ(nr_partial(c), 1);
	CHECK_EQ(info_of(c).slabs_freed, 0);
	CHECK_EQ(uslab_cache_validate(c), 0);
	for (unsigned i = 0; i < PER; i++)
		objs[i] = NULL;
	finish(c, objs, 2 * PER);
}

/* ---- PARTIAL -> PARTIAL (#10) and PARTIAL -> EMPTY (#11), kept or discarded -------------- */

static void test_partial_to_empty(void)
{
	struct uslab_cache *c = new_cache("t-partial-empty");
	static void *objs[16 * PER];
	unsigned k = c->min_partial + 1;
	struct job mk = { .c = c, .objs = objs, .n = k, .live = 2 };

	job_make_partial(&mk);                     /* on this thread */
	CHECK_EQ(nr_partial(c), k);
	for (unsigned s = 0; s < k; s++) {
		struct word w = word_of(objs[s * PER]);
		CHECK(!w.frozen && w.on_partial);
		CHECK_EQ(w.inuse, 2);
	}
	CHECK_EQ(uslab_cache_validate(c), 0);
	struct uslab_cache_info before = info_of(c);

	/* PARTIAL -> PARTIAL: the other thread's free does not take the slab */
	struct job *j = other_do(job_free, c, &objs[0], 1);
	struct word w = word_of(objs[1]);
	CHECK(!w.frozen && w.on_partial);
	CHECK_EQ(w.inuse, 1);
	CHECK(w.freelist == objs[0]);
	CHECK(j->snap.partial == NULL && j->snap.slab == NULL);
	CHECK_EQ(nr_partial(c), k);
	CHECK_EQ(uslab_cache_validate(c), 0);

	/* PARTIAL -> EMPTY with nr_partial > min_partial: discarded */
	struct slab *s0 = ptr_to_slab(objs[1]);
	other_do(job_free, c, &objs[1], 1);
	struct uslab_cache_info after = info_of(c);
	CHECK_EQ(after.slabs_freed, before.slabs_freed + 1);
	CHECK_EQ(after.slabs, before.slabs - 1);
	CHECK_EQ(nr_partial(c), c->min_partial);
	CHECK(ptr_to_slab(objs[1]) == NULL);
	CHECK(s0->on_partial == 0);
	CHECK_EQ(uslab_cache_validate(c), 0);
	objs[0] = objs[1] = NULL;

	/* PARTIAL -> EMPTY with nr_partial == min_partial: kept */
	other_do(job_free, c, &objs[PER], 2);
	w = word_of(objs[PER]);
	CHECK(!w.frozen && w.on_partial);
	CHECK_EQ(w.inuse, 0);
	CHECK_EQ(chain_len(c, w.freelist), PER);
	CHECK_EQ(nr_partial(c), c->min_partial);
	CHECK_EQ(info_of(c).slabs_freed, after.slabs_freed);
	CHECK_EQ(uslab_cache_validate(c), 0);
	objs[PER] = objs[PER + 1] = NULL;
	finish(c, objs, k * PER);
}

/* ---- PARTIAL -> FROZEN: a refill from the partial list (#7) ------------------------------ */

/* job_alloc by a thread that has made j->live refills so far (the address
 * order and the size of a take from the partial list go by it:
 * refill_ordered); its own count is put back after. */
static void job_alloc_after_refills(void *arg)
{
	struct job *j = arg;

	REQUIRE(cpu_slab_get(j->c) != NULL);   /* a heap of its own to count in */
	unsigned saved = tls_heap->refills;

	tls_heap->refills = j->live;
	job_alloc(arg);
	tls_heap->refills = saved;
}

/*
 * A thread past its first ORDER_AFTER_REFILLS refills (warm) takes a
 * partial slab's whole freelist; one before them takes a page's worth, and
 * the rest stays in the frozen slab's word (#7).
 */
static void partial_refill_case(bool warm)
{
	struct uslab_cache *c = new_cache(warm ? "t-partial-refill" : "t-partial-refill-cold");
	static void *objs[3 * PER];
	struct job mk = { .c = c, .objs = objs, .n = 3, .live = 10 };
	unsigned page = (unsigned)(os_page_size() / OBJ_SIZE);
	unsigned took = warm ? PER - 10 : page < COLD_REFILL_MAX ? page : COLD_REFILL_MAX;
	void *x;

	REQUIRE(warm || (took > 1 && took < PER - 10));   /* a part of the chain */
	job_make_partial(&mk);
	CHECK_EQ(nr_partial(c), 3);
	static struct job job;

	job = (struct job){ .c = c, .objs = &x, .n = 1, .live = warm ? ORDER_AFTER_REFILLS : 0 };
	puppet_run(&other, job_alloc_after_refills, &job);
	struct job *j = &job;
	struct slab *t = ptr_to_slab(x);
	struct word w = word_of(x);
	CHECK(w.frozen && !w.on_partial);
	CHECK_EQ(chain_len(c, w.freelist), PER - 10 - took);   /* what it left */
	CHECK_EQ(w.inuse, 10 + took);
	CHECK_EQ(nr_partial(c), 2);
	CHECK(j->snap.slab == t);
	CHECK_EQ(j->private_len, took - 1);
	for (unsigned i = 0; i < 3 * PER; i++)
		CHECK(objs[i] != x);                   /* x was free, not one of the live */
	CHECK_LIVE(c, 3 * 10 + 1, took - 1);
	CHECK_EQ(uslab_cache_validate(c), 0);

	/* and back: the refilling thread's flush makes it PARTIAL again */
	other_do(job_flush, c, NULL, 0);
	w = word_of(x);
	CHECK(!w.frozen && w.on_partial);
	CHECK_EQ(w.inuse, 11);
	CHECK_EQ(nr_partial(c), 3);
	CHECK_EQ(uslab_cache_validate(c), 0);
	uslab_cache_free(c, x);
	finish(c, objs, 3 * PER);
}

static void test_partial_to_frozen_on_refill(void)
{
	partial_refill_case(true);
	partial_refill_case(false);
}

/* ---- cpu-partial overflow: the drain unfreezes (#4, #6) --------------------------------- */

static void test_cpu_partial_overflow(void)
{
	struct uslab_cache *c = new_cache("t-cpu-partial");
	static void *objs[40 * PER];
	unsigned cp = c->cpu_partial;

	REQUIRE(cp + 2 <= 40);
	for (unsigned i = 0; i < (cp + 2) * PER; i++)
		objs[i] = uslab_cache_alloc(c);       /* slabs 0..cp FULL, cp+1 active */
	make_dry_full(c);

	/* slab 0 entirely: its first free freezes it for the freer, the other
	 * PER - 1 are that owner's local frees; slabs 1..cp-1 one object each */
	struct job *j = other_do(job_free, c, &objs[0], PER);
	for (unsigned s = 1; s < cp; s++)
		j = other_do(job_free, c, &objs[s * PER], 1);
	CHECK_EQ(j->snap.nr_partial, cp);
	for (unsigned s = 0; s < cp; s++) {
		struct word w = word_of(objs[s * PER + 1]);
		CHECK(w.frozen && !w.on_partial);
		CHECK_EQ(w.inuse, PER - 1);
		CHECK(w.freelist == objs[s * PER]);
		CHECK(on_cpu_partial(&j->snap, w.slab));
		CHECK(w.slab->owner == j->heap);
		CHECK_EQ(chain_len(c, w.slab->local_free), s == 0 ? PER - 1 : 0);
	}
	CHECK_LIVE(c, (cp + 2) * PER - PER - (cp - 1), PER - 1);
	CHECK_EQ(nr_partial(c), 0);
	CHECK_EQ(uslab_cache_validate(c), 0);
	struct uslab_cache_info before = info_of(c);

	/* one more freeze overflows: the cp held slabs are unfrozen first */
	j = other_do(job_free, c, &objs[cp * PER], 1);
	CHECK_EQ(j->snap.nr_partial, 1);
	CHECK(j->snap.partial == ptr_to_slab(objs[cp * PER]));
	CHECK(word_of(objs[cp * PER + 1]).frozen);
	for (unsigned s = 1; s < cp; s++) {
		struct word w = word_of(objs[s * PER + 1]);
		CHECK(!w.frozen && w.on_partial);
		CHECK_EQ(w.inuse, PER - 1);
	}
	/* slab 0 was drained last (the list is LIFO), behind cp - 1 partial
	 * slabs; its owner-local list went back with it: EMPTY */
	bool keep0 = cp - 1 < c->min_partial;
	if (keep0) {
		struct word w = word_of(objs[1]);
		CHECK(!w.frozen && w.on_partial);
		CHECK_EQ(w.inuse, 0);
		CHECK_EQ(chain_len(c, w.freelist), PER);
		CHECK(w.slab->owner == NULL && w.slab->local_free == NULL);
	} else {
		CHECK(ptr_to_slab(objs[1]) == NULL);
	}
	CHECK_EQ(nr_partial(c), cp - 1 + keep0);
	CHECK_EQ(info_of(c).slabs_freed, before.slabs_freed + !keep0);
	CHECK_EQ(uslab_cache_validate(c), 0);

	for (unsigned i = 0; i < PER; i++)
		objs[i] = NULL;
	for (unsigned s = 1; s <= cp; s++)
		objs[s * PER] = NULL;
	finish(c, objs, (cp + 2) * PER);
}

/* ---- FROZEN (active, dry) -> FROZEN (cpu-partial tail) (#5a); refill skips dry slabs -------- */

static void test_dry_active_stays_frozen(void)
{
	struct uslab_cache *c = new_cache("t-dry");
	static void *objs[3 * PER + 2];
	struct cpu_slab *cs;
	unsigned n = 0;

	for (unsigned i = 0; i < PER; i++)
		objs[n++] = uslab_cache_alloc(c);       /* A exhausted, still active */
	struct slab *a = ptr_to_slab(objs[0]);
	objs[n++] = uslab_cache_alloc(c);            /* A runs dry: B active */
	struct slab *b = ptr_to_slab(objs[PER]);
	cs = this_cpu_slab(c);
	struct word w = word_of(objs[0]);
	CHECK(b != a && cs->slab == b);
	CHECK(w.frozen && !w.on_partial && w.freelist == NULL);   /* not FULL: frozen */
	CHECK_EQ(w.inuse, PER);
	CHECK(a->owner == tls_heap && on_cpu_partial(cs, a) && cs->nr_partial == 1);
	CHECK_EQ(nr_partial(c), 0);
	CHECK_EQ(uslab_cache_validate(c), 0);

	/* the owner's frees into the dry slab are local: the word does not move */
	uslab_cache_free(c, objs[3]);
	uslab_cache_free(c, objs[7]);
	w = word_of(objs[0]);
	CHECK(w.frozen && w.freelist == NULL && w.inuse == PER);
	CHECK(a->local_free == objs[7] && fp_get(c, objs[7]) == objs[3]);
	CHECK_EQ(uslab_cache_validate(c), 0);

	/* B runs dry too: it goes to the tail, and the refill takes A's frees */
	for (unsigned i = 1; i < PER; i++)
		objs[n++] = uslab_cache_alloc(c);
	void *x = uslab_cache_alloc(c);
	CHECK(x == objs[7]);
	CHECK(cs->slab == a && cs->partial == b && cs->nr_partial == 1);
	CHECK(a->local_free == NULL && word_of(objs[PER]).frozen);
	void *y = uslab_cache_alloc(c);
	CHECK(y == objs[3]);
	objs[7] = x;                                  /* the same objects, live again */
	objs[3] = y;
	CHECK_EQ(uslab_cache_validate(c), 0);

	/* A dry again: the refill looks at the head, B, which is dry (and goes
	 * to the tail), so a new slab C; then a local free into A brings A to
	 * the head, and when C runs dry the refill takes A */
	objs[n++] = uslab_cache_alloc(c);
	struct slab *cc = ptr_to_slab(objs[n - 1]);
	CHECK(cc != a && cc != b && cs->slab == cc);
	CHECK(cs->partial == a && a->next == b && b->next == NULL && cs->nr_partial == 2);
	CHECK(cs->partial->prev == b && b->prev == a);
	uslab_cache_free(c, objs[9]);
	CHECK(a->local_free == objs[9] && cs->partial == a && cs->parked == 1);
	for (unsigned i = 1; i < PER; i++)
		objs[n++] = uslab_cache_alloc(c);
	void *z = uslab_cache_alloc(c);
	CHECK(z == objs[9]);
	objs[9] = z;
	CHECK(cs->slab == a);
	CHECK(on_cpu_partial(cs, b) && on_cpu_partial(cs, cc) && cs->nr_partial == 2);
	CHECK(word_of(objs[PER]).frozen && b->owner == tls_heap);   /* skipped, kept */
	CHECK_EQ(uslab_cache_validate(c), 0);

	/* a drain makes the dry slabs FULL: unfrozen, on no list */
	make_dry_full(c);
	w = word_of(objs[PER]);
	CHECK(!w.frozen && !w.on_partial && w.inuse == PER && b->owner == NULL);
	w = word_of(objs[n - 1]);
	CHECK(!w.frozen && !w.on_partial && w.inuse == PER);
	CHECK_EQ(nr_partial(c), 0);
	CHECK_EQ(uslab_cache_validate(c), 0);
	finish(c, objs, n);
}

/*
 * A dry cpu-partial slab takes remote frees like any frozen slab (#2: the
 * freer pushes on its shared word and does not take it); the refill loop
 * takes that list by dwcas (#3). A slab with both an owner-local and a
 * shared list gives the local one first, then, as the active slab, the
 * shared one.
 */
static void test_dry_slab_remote_frees(void)
{
	struct uslab_cache *c = new_cache("t-dry-remote");
	static void *objs[2 * PER];

	for (unsigned i = 0; i < PER + 1; i++)
		objs[i] = uslab_cache_alloc(c);       /* A dry on the list, B active */
	struct slab *a = ptr_to_slab(objs[0]), *b = ptr_to_slab(objs[PER]);
	struct cpu_slab *cs = this_cpu_slab(c);
	CHECK(cs->slab == b && cs->partial == a && a->next == NULL && cs->nr_partial == 1);

	/* a remote free into the dry slab: shared word, still frozen and ours */
	struct job *j = other_do(job_free, c, &objs[10], 1);
	struct word w = word_of(objs[0]);
	CHECK(w.frozen && !w.on_partial);
	CHECK(w.freelist == objs[10] && fp_get(c, objs[10]) == NULL);
	CHECK_EQ(w.inuse, PER - 1);
	CHECK(a->owner == tls_heap && a->local_free == NULL);
	CHECK(j->snap.slab == NULL && j->snap.partial == NULL && j->snap.nr_partial == 0);
	CHECK(cs->slab == b && cs->partial == a && cs->nr_partial == 1);
	CHECK_EQ(nr_partial(c), 0);
	CHECK_EQ(info_of(c).live_objects, PER);
	CHECK_EQ(uslab_cache_validate(c), 0);

	/* B runs dry: [A, B]; the loop takes A's shared list by dwcas */
	for (unsigned i = PER + 1; i < 2 * PER; i++)
		objs[i] = uslab_cache_alloc(c);
	CHECK(cs->slab == b && cs->freelist == NULL);
	void *x = uslab_cache_alloc(c);
	CHECK(x == objs[10]);
	CHECK(cs->slab == a && cs->freelist == NULL);
	CHECK(cs->partial == b && b->next == NULL && cs->nr_partial == 1);
	w = word_of(objs[0]);
	CHECK(w.frozen && w.freelist == NULL);
	CHECK_EQ(w.inuse, PER);
	w = word_of(objs[PER]);
	CHECK(w.frozen && !w.on_partial && w.freelist == NULL);
	CHECK_EQ(w.inuse, PER);
	CHECK(b->owner == tls_heap);
	CHECK_EQ(uslab_cache_validate(c), 0);

	/* into dry B: our local free, and a remote one on the shared word */
	uslab_cache_free(c, objs[PER + 3]);
	other_do(job_free, c, &objs[PER + 4], 1);
	w = word_of(objs[PER]);
	CHECK(w.frozen && w.freelist == objs[PER + 4]);
	CHECK_EQ(w.inuse, PER - 1);
	CHECK(b->local_free == objs[PER + 3] && b->local_count == 1);
	CHECK_LIVE(c, 2 * PER - 2, 1);
	CHECK_EQ(uslab_cache_validate(c), 0);

	/* A dry again: [B, A]; B gives its local list first ... */
	void *y = uslab_cache_alloc(c);
	CHECK(y == objs[PER + 3]);
	CHECK(cs->slab == b && cs->freelist == NULL && b->local_free == NULL);
	CHECK(cs->partial == a && a->next == NULL && cs->nr_partial == 1);
	w = word_of(objs[PER]);
	CHECK(w.frozen && w.freelist == objs[PER + 4]);   /* the shared list untouched */
	CHECK_EQ(w.inuse, PER - 1);
	w = word_of(objs[0]);
	CHECK(w.frozen && w.freelist == NULL && a->owner == tls_heap);
	CHECK_EQ(w.inuse, PER);

	/* ... then, as the active slab, its shared list */
	void *z = uslab_cache_alloc(c);
	CHECK(z == objs[PER + 4]);
	CHECK(cs->slab == b && cs->freelist == NULL);
	CHECK(cs->partial == a && cs->nr_partial == 1);
	w = word_of(objs[PER]);
	CHECK(w.frozen && w.freelist == NULL);
	CHECK_EQ(w.inuse, PER);
	CHECK_EQ(nr_partial(c), 0);
	CHECK_EQ(info_of(c).slabs, 2);
	CHECK_EQ(uslab_cache_validate(c), 0);
	finish(c, objs, 2 * PER);
}

/*
 * The cpu-partial list keeps the slabs with objects to give in front: an
 * owner-local free into a listed slab that had none moves it to the head
 * (wherever it was), and a refill takes the head. The list's back links
 * and its count of parked objects follow (validate checks both).
 */
static void test_cpu_partial_order(void)
{
	struct uslab_cache *c = new_cache("t-cpu-partial-order");
	static void *objs[4 * PER + 1];
	struct slab *sl[4];

	for (unsigned i = 0; i < 3 * PER + 1; i++)
		objs[i] = uslab_cache_alloc(c);       /* 0, 1, 2 dry, 3 active */
	struct cpu_slab *cs = this_cpu_slab(c);
	for (unsigned s = 0; s < 4; s++)
		sl[s] = ptr_to_slab(objs[s * PER]);
	CHECK(cs->slab == sl[3] && cs->nr_partial == 3 && cs->parked == 0);
	uslab_cache_free(c, objs[2 * PER + 4]);       /* 2 to the head */
	uslab_cache_free(c, objs[4]);                 /* 0 to the head */
	uslab_cache_free(c, objs[PER + 4]);           /* 1 to the head */
	uslab_cache_free(c, objs[5]);                 /* 0 has one: stays */
	CHECK(cs->partial == sl[1] && sl[1]->next == sl[0] && sl[0]->next == sl[2]);
	CHECK(sl[2]->next == NULL && cs->partial->prev == sl[2]);
	CHECK(sl[2]->prev == sl[0] && sl[0]->prev == sl[1]);
	CHECK_EQ(cs->parked, 4);
	CHECK_EQ(uslab_cache_validate(c), 0);
	for (unsigned i = 3 * PER + 1; i < 4 * PER; i++)
		objs[i] = uslab_cache_alloc(c);       /* 3 dry: to the tail */
	void *x = uslab_cache_alloc(c);               /* the head's free */
	CHECK(x == objs[PER + 4] && cs->slab == sl[1]);
	objs[PER + 4] = x;
	CHECK(cs->partial == sl[0] && sl[0]->next == sl[2] && sl[2]->next == sl[3]);
	CHECK(cs->partial->prev == sl[3] && cs->nr_partial == 3);
	CHECK_EQ(cs->parked, 3);
	CHECK_EQ(uslab_cache_validate(c), 0);
	objs[4] = objs[5] = objs[2 * PER + 4] = NULL;
	finish(c, objs, 4 * PER);
}

/*
 * A refill whose chain holds half of its slab's objects or more hands them
 * out in address order, whatever order they were freed in, once the thread
 * has refilled ORDER_AFTER_REFILLS times (warm); a shorter one, or any
 * before that, keeps the order of the frees (the last freed first).
 */
static void refill_order_case(bool warm)
{
	struct uslab_cache *c = new_cache(warm ? "t-address-order" : "t-address-order-cold");
	unsigned saved = tls_heap->refills;
	static void *objs[4 * PER + 8];
	static const unsigned few[] = { 40, 7, 33, 2 };
	struct cpu_slab *cs;
	unsigned n = 0;

	for (; n < 2 * PER + 1; n++)
		objs[n] = uslab_cache_alloc(c);       /* A, B dry, C active */
	struct slab *a = ptr_to_slab(objs[0]), *b = ptr_to_slab(objs[PER]);
	cs = this_cpu_slab(c);
	CHECK(on_cpu_partial(cs, a) && on_cpu_partial(cs, b));
	long ordered = heap_stat(tls_heap, c)[STAT_CHAIN_ORDERED];

	/* A: all but its first object freed, in a scattered order (i * 37
	 * mod 64, i = 1 .. 63, visits each other index once); B: four */
	for (unsigned i = 1; i < PER; i++) {
		unsigned k = i * 37 % PER;

		uslab_cache_free(c, objs[k]);
		objs[k] = NULL;
	}
	for (unsigned i = 0; i < 4; i++) {
		uslab_cache_free(c, objs[PER + few[i]]);
		objs[PER + few[i]] = NULL;
	}
	CHECK(cs->partial == b && b->next == a);
	CHECK_EQ(uslab_cache_validate(c), 0);
	for (unsigned i = 1; i < PER; i++)            /* C runs out */
		objs[n++] = uslab_cache_alloc(c);

	/* the thread's refills so far: a warm one's, or a new one's */
	tls_heap->refills = warm ? ORDER_AFTER_REFILLS : 0;
	/* B's four, the last freed first, then A's 63: from the lowest up, or
	 * (cold) the last freed first */
	for (unsigned i = 0; i < 4; i++) {
		void *x = uslab_cache_alloc(c);

		CHECK(x == (char *)b->base + (size_t)few[3 - i] * OBJ_SIZE);
		objs[n++] = x;
	}
	for (unsigned i = 1; i < PER; i++) {
		void *x = uslab_cache_alloc(c);
		unsigned k = warm ? i : (PER - i) * 37 % PER;   /* freed i-th: k = i * 37 */

		CHECK(x == (char *)a->base + (size_t)k * OBJ_SIZE);
		objs[n++] = x;
	}
	CHECK_EQ(heap_stat(tls_heap, c)[STAT_CHAIN_ORDERED], ordered + warm);
	CHECK_EQ(uslab_cache_validate(c), 0);
	tls_heap->refills = saved + (warm ? 0 : ORDER_AFTER_REFILLS);
	finish(c, objs, n);
}

static void test_refill_in_address_order(void)
{
	refill_order_case(false);
	refill_order_case(true);
}

/*
 * A chain in address order already - a slab's objects freed in the order
 * they were allocated (the list then falls) or the reverse (it rises) - is
 * handed out as it is, not relinked (chain_ordered does not count it).
 */
static void refill_kept_order_case(bool falling)
{
	struct uslab_cache *c = new_cache(falling ? "t-order-falling" : "t-order-rising");
	unsigned saved = tls_heap->refills;
	static void *objs[3 * PER];
	unsigned n = 0;

	for (; n < PER + 1; n++)
		objs[n] = uslab_cache_alloc(c);       /* A dry, B active */
	struct slab *a = ptr_to_slab(objs[0]);
	CHECK(on_cpu_partial(this_cpu_slab(c), a));
	long ordered = heap_stat(tls_heap, c)[STAT_CHAIN_ORDERED];

	for (unsigned i = 1; i < PER; i++) {       /* all of A's but its first */
		unsigned k = falling ? i : PER - i;

		uslab_cache_free(c, objs[k]);
		objs[k] = NULL;
	}
	for (unsigned i = 1; i < PER; i++)            /* B runs out */
		objs[n++] = uslab_cache_alloc(c);
	tls_heap->refills = ORDER_AFTER_REFILLS;
	for (unsigned i = 1; i < PER; i++) {         /* A's 63, as they were freed, the last first */
		void *x = uslab_cache_alloc(c);
		unsigned k = falling ? PER - i : i;

		CHECK(x == (char *)a->base + (size_t)k * OBJ_SIZE);
		objs[n++] = x;
	}
	CHECK_EQ(heap_stat(tls_heap, c)[STAT_CHAIN_ORDERED], ordered);
	CHECK_EQ(uslab_cache_validate(c), 0);
	tls_heap->refills = saved;
	finish(c, objs, n);
}

static void test_refill_keeps_address_order(void)
{
	refill_kept_order_case(true);
	refill_kept_order_case(false);
}

/*
 * uslab_thread_flush of a thread with dry slabs on its cpu-partial list: a
 * dry slab with nothing free goes FULL (#5), one with owner-local or remote
 * frees goes PARTIAL (#4).
 */
static void test_flush_dry_cpu_partial(void)
{
	struct uslab_cache *c = new_cache("t-dry-flush");
	static void *objs[3 * PER + 1];

	REQUIRE(c->cpu_partial >= 3);
	for (unsigned i = 0; i < 3 * PER + 1; i++)
		objs[i] = uslab_cache_alloc(c);       /* [A, B, C] dry, D active */
	struct cpu_slab *cs = this_cpu_slab(c);
	struct slab *a = ptr_to_slab(objs[0]), *b = ptr_to_slab(objs[PER]);
	struct slab *cc = ptr_to_slab(objs[2 * PER]), *d = ptr_to_slab(objs[3 * PER]);
	CHECK(cs->slab == d && cs->nr_partial == 3);
	CHECK(on_cpu_partial(cs, a) && on_cpu_partial(cs, b) && on_cpu_partial(cs, cc));

	uslab_cache_free(c, objs[5]);                 /* A: owner-local */
	other_do(job_free, c, &objs[PER + 5], 1);     /* B: remote, shared */
	CHECK(a->local_free == objs[5] && word_of(objs[0]).freelist == NULL);
	CHECK(word_of(objs[PER]).freelist == objs[PER + 5]);
	CHECK_LIVE(c, 3 * PER - 1, 1);
	CHECK_EQ(uslab_cache_validate(c), 0);

	uslab_thread_flush();
	CHECK(cs->slab == NULL && cs->freelist == NULL);
	CHECK(cs->partial == NULL && cs->nr_partial == 0);
	struct word w = word_of(objs[0]);
	CHECK(!w.frozen && w.on_partial && w.freelist == objs[5] && fp_get(c, objs[5]) == NULL);
	CHECK_EQ(w.inuse, PER - 1);
	CHECK(a->owner == NULL && a->local_free == NULL && a->local_count == 0);
	w = word_of(objs[PER]);
	CHECK(!w.frozen && w.on_partial && w.freelist == objs[PER + 5]);
	CHECK_EQ(w.inuse, PER - 1);
	CHECK(b->owner == NULL);
	w = word_of(objs[2 * PER]);
	CHECK(!w.frozen && !w.on_partial && w.freelist == NULL);   /* FULL */
	CHECK_EQ(w.inuse, PER);
	CHECK(cc->owner == NULL && cc->local_free == NULL);
	w = word_of(objs[3 * PER]);
	CHECK(!w.frozen && w.on_partial);
	CHECK_EQ(w.inuse, 1);
	CHECK_EQ(nr_partial(c), 3);
	CHECK_EQ(info_of(c).live_objects, 3 * PER - 1);
	CHECK_EQ(uslab_cache_validate(c), 0);
	objs[5] = objs[PER + 5] = NULL;
	finish(c, objs, 3 * PER + 1);
}

/*
 * A slab running dry with cpu_partial slabs already listed drains the whole
 * list first (dry ones FULL, the others PARTIAL), then is the list's only
 * slab; the refill then comes from the partial list (#7), the slab that
 * joined it first (both have one free object: the second joins at the tail).
 */
static void test_dry_overflow_drains(void)
{
	struct uslab_cache *c = new_cache("t-dry-overflow");
	static void *objs[40 * PER];
	unsigned cp = c->cpu_partial;
	struct slab *sl[40];

	REQUIRE(cp >= 3 && cp + 1 <= 40);
	for (unsigned i = 0; i < (cp + 1) * PER; i++)
		objs[i] = uslab_cache_alloc(c);       /* slabs 0..cp-1 dry, cp active */
	struct cpu_slab *cs = this_cpu_slab(c);
	for (unsigned s = 0; s <= cp; s++)
		sl[s] = ptr_to_slab(objs[s * PER]);
	CHECK(cs->slab == sl[cp] && cs->freelist == NULL);
	CHECK_EQ(cs->nr_partial, cp);
	for (unsigned s = 0; s < cp; s++) {
		CHECK(on_cpu_partial(cs, sl[s]));
		CHECK(word_of(objs[s * PER]).frozen && sl[s]->owner == tls_heap);
	}
	uslab_cache_free(c, objs[5]);                 /* slab 0: owner-local */
	other_do(job_free, c, &objs[PER + 5], 1);     /* slab 1: remote */
	CHECK_EQ(nr_partial(c), 0);
	CHECK_EQ(uslab_cache_validate(c), 0);
	struct uslab_cache_info before = info_of(c);

	/* slabs 0 and 1 joined the list with one free object each: slab 0
	 * first (the list was empty), slab 1 at the tail */
	void *x = uslab_cache_alloc(c);
	CHECK(x == objs[5]);                          /* slab 0, the older PARTIAL */
	CHECK(cs->slab == sl[0] && cs->freelist == NULL);
	CHECK(cs->partial == sl[cp] && sl[cp]->next == NULL && cs->nr_partial == 1);
	struct word w = word_of(objs[cp * PER]);
	CHECK(w.frozen && !w.on_partial && w.freelist == NULL && sl[cp]->owner == tls_heap);
	CHECK_EQ(w.inuse, PER);
	w = word_of(objs[0]);
	CHECK(w.frozen && !w.on_partial && w.freelist == NULL);
	CHECK_EQ(w.inuse, PER);
	CHECK(sl[0]->owner == tls_heap);
	w = word_of(objs[PER]);
	CHECK(!w.frozen && w.on_partial && w.freelist == objs[PER + 5]);
	CHECK_EQ(w.inuse, PER - 1);
	CHECK(sl[1]->owner == NULL && sl[1]->local_free == NULL);
	for (unsigned s = 2; s < cp; s++) {
		w = word_of(objs[s * PER]);
		CHECK(!w.frozen && !w.on_partial && w.freelist == NULL);   /* FULL */
		CHECK_EQ(w.inuse, PER);
		CHECK(sl[s]->owner == NULL);
	}
	CHECK_EQ(nr_partial(c), 1);
	CHECK_EQ(info_of(c).slabs, before.slabs);
	CHECK_EQ(info_of(c).live_objects, (cp + 1) * PER - 1);
	CHECK_EQ(uslab_cache_validate(c), 0);
	objs[PER + 5] = NULL;
	objs[5] = x;
	finish(c, objs, (cp + 1) * PER);
}

/* Thread exit drains a dry cpu-partial slab to FULL; the active one goes PARTIAL. */
struct dry_exit_arg {
	struct uslab_cache *c;
	void *objs[PER + 1];
	struct slab *dry, *active;
};

static void thread_dry_exit(void *arg)
{
	struct dry_exit_arg *a = arg;

	for (unsigned i = 0; i < PER + 1; i++)
		REQUIRE((a->objs[i] = uslab_cache_alloc(a->c)) != NULL);
	struct cpu_slab *cs = this_cpu_slab(a->c);
	a->dry = ptr_to_slab(a->objs[0]);
	a->active = ptr_to_slab(a->objs[PER]);
	CHECK(cs->slab == a->active && cs->partial == a->dry && cs->nr_partial == 1);
	CHECK(word_of(a->objs[0]).frozen && a->dry->owner == tls_heap);
}

static void test_exit_dry_full(void)
{
	struct uslab_cache *c = new_cache("t-dry-exit");
	static struct dry_exit_arg a;

	a.c = c;
	run_in_thread(thread_dry_exit, &a);
	struct word w = word_of(a.objs[0]);
	CHECK(w.slab == a.dry);
	CHECK(!w.frozen && !w.on_partial && w.freelist == NULL);   /* FULL */
	CHECK_EQ(w.inuse, PER);
	CHECK(a.dry->owner == NULL && a.dry->local_free == NULL);
	w = word_of(a.objs[PER]);
	CHECK(w.slab == a.active);
	CHECK(!w.frozen && w.on_partial);
	CHECK_EQ(w.inuse, 1);
	CHECK(a.active->owner == NULL);
	CHECK_EQ(nr_partial(c), 1);
	CHECK_EQ(info_of(c).live_objects, PER + 1);
	CHECK_EQ(uslab_cache_validate(c), 0);

	/* a free into the FULL slab freezes it for the freer (#8) */
	uslab_cache_free(c, a.objs[7]);
	w = word_of(a.objs[0]);
	CHECK(w.frozen && w.freelist == a.objs[7]);
	CHECK_EQ(w.inuse, PER - 1);
	CHECK(a.dry->owner == tls_heap && this_cpu_slab(c)->partial == a.dry);
	CHECK_EQ(uslab_cache_validate(c), 0);
	a.objs[7] = NULL;
	finish(c, a.objs, PER + 1);
}

/* ---- thread exit: the exit flush unfreezes everything the thread held ------------------- */

struct exit_arg {
	struct uslab_cache *c;
	void **full;               /* objects of two FULL slabs to free: A, B, A */
	void *mine[10];            /* allocated here, left live */
	struct slab *active;
};

static void thread_alloc_free_exit(void *arg)
{
	struct exit_arg *a = arg;
	struct cpu_slab *cs;

	for (int i = 0; i < 10; i++)
		REQUIRE((a->mine[i] = uslab_cache_alloc(a->c)) != NULL);
	uslab_cache_free(a->c, a->full[0]);           /* freezes A for us */
	uslab_cache_free(a->c, a->full[1]);           /* freezes B for us */
	uslab_cache_free(a->c, a->full[2]);           /* our local free into A */
	cs = this_cpu_slab(a->c);
	a->active = cs->slab;
	CHECK(cs->slab == ptr_to_slab(a->mine[0]));
	CHECK_EQ(cs->nr_partial, 2);
	CHECK(on_cpu_partial(cs, ptr_to_slab(a->full[0])));
	CHECK(on_cpu_partial(cs, ptr_to_slab(a->full[1])));
	CHECK(word_of(a->full[0]).frozen && word_of(a->full[1]).frozen);
	CHECK(ptr_to_slab(a->full[0])->local_free == a->full[2]);
}

static void test_thread_exit_unfreezes(void)
{
	struct uslab_cache *c = new_cache("t-exit");
	static void *objs[2 * PER + 1];
	void *full[3];

	for (unsigned i = 0; i < 2 * PER + 1; i++)
		objs[i] = uslab_cache_alloc(c);       /* A, B FULL; C active */
	make_dry_full(c);
	full[0] = objs[0];
	full[1] = objs[PER];
	full[2] = objs[1];
	struct exit_arg a = { .c = c, .full = full };
	run_in_thread(thread_alloc_free_exit, &a);

	struct word w = word_of(a.mine[0]);
	CHECK(w.slab == a.active);
	CHECK(!w.frozen && w.on_partial);
	CHECK_EQ(w.inuse, 10);
	for (int i = 0; i < 2; i++) {
		w = word_of(full[i]);
		CHECK(!w.frozen && w.on_partial);
		CHECK_EQ(w.inuse, i == 0 ? PER - 2 : PER - 1);   /* A: its local free too */
		CHECK(w.slab->owner == NULL && w.slab->local_free == NULL);
	}
	CHECK_EQ(nr_partial(c), 3);
	CHECK_EQ(uslab_cache_validate(c), 0);

	/* its live objects, freed by us: the last free empties a listed slab */
	for (int i = 0; i < 10; i++)
		uslab_cache_free(c, a.mine[i]);
	w = word_of(a.mine[0]);
	CHECK(!w.frozen && w.on_partial);
	CHECK_EQ(w.inuse, 0);
	CHECK(this_cpu_slab(c)->partial == NULL);
	CHECK_EQ(uslab_cache_validate(c), 0);
	objs[0] = objs[1] = objs[PER] = NULL;
	finish(c, objs, 2 * PER + 1);
}

/* ---- validate is not vacuous ------------------------------------------------------------ */

static void test_validate_sees_damage(void)
{
	struct uslab_cache *c = new_cache("t-validate");
	void *objs[4];

	for (int i = 0; i < 4; i++)
		objs[i] = uslab_cache_alloc(c);
	uslab_thread_flush();
	struct slab *slab = ptr_to_slab(objs[0]);
	CHECK_EQ(uslab_cache_validate(c), 0);

	fprintf(stderr, "(one validate complaint about a miscounted slab is expected next)\n");
	dword_t w = dwcas_read_stable(&slab->xword), bad = w;
	bad.hi = ctr_make(ctr_inuse(w.hi) + 1, ctr_objects(w.hi), false);
	CHECK(dwcas_try_cmpxchg(&slab->xword, &w, bad));
	CHECK(uslab_cache_validate(c) > 0);
	CHECK(dwcas_try_cmpxchg(&slab->xword, &bad, w));
	CHECK_EQ(uslab_cache_validate(c), 0);
	finish(c, objs, 4);
}

/* ---- the default: another thread's objects go back to it by message (#2b) ------------ */

static void test_remote_frees_by_message(void)
{
	struct uslab_cache *c = uslab_cache_create("t-message", OBJ_SIZE, 0, 0, NULL);
	static void *objs[PER / 2];
	void *again[1];

	REQUIRE(c != NULL);
	other_do(job_alloc, c, objs, PER / 2);        /* the puppet's active slab */
	struct word w0 = word_of(objs[0]);
	struct thread_heap *owner = w0.slab->owner;
	CHECK(w0.frozen && owner != NULL && owner != tls_heap);
	CHECK_EQ(w0.inuse, PER);

	uslab_cache_free(c, objs[3]);
	uslab_cache_free(c, objs[4]);
	struct word w = word_of(objs[0]);
	CHECK(w.frozen && w.freelist == w0.freelist);   /* the word is untouched */
	CHECK_EQ(w.inuse, PER);
	/* nothing written into the objects: their pointers wait in this
	 * thread's outbox, addressed to the owner */
	struct remote_msg *m = *heap_outbox(tls_heap, c->id);
	CHECK(m != NULL && m->to == owner && m->cache == c && m->count == 2);
	CHECK(m && m->obj[0] == objs[3] && m->obj[1] == objs[4]);
	CHECK(this_cpu_slab(c)->freelist == NULL);
	CHECK_EQ(mailbox_peek(heap_inbox(owner, c->id)), 0);
	CHECK_EQ(uslab_cache_validate(c), 0);
	CHECK_LIVE(c, PER / 2 - 2, 2);                /* a message's objects count as live */

	uslab_thread_flush();                         /* sends what is in the outbox */
	CHECK(*heap_outbox(tls_heap, c->id) == NULL);
	CHECK(mailbox_peek(heap_inbox(owner, c->id)) == (uintptr_t)m && m->node.next == NULL);
	w = word_of(objs[0]);
	CHECK(w.frozen && w.freelist == w0.freelist && w.inuse == PER);
	CHECK_EQ(uslab_cache_validate(c), 0);

	/* the owner's next slow-path allocation takes its inbox: the objects go
	 * on its cpu freelist, last freed first */
	other_do(job_alloc, c, again, 1);
	CHECK(again[0] == objs[4]);
	CHECK_EQ(mailbox_peek(heap_inbox(owner, c->id)), 0);
	w = word_of(objs[0]);
	CHECK(w.frozen && w.freelist == w0.freelist && w.inuse == PER);   /* still no dwcas */
	CHECK_EQ(uslab_cache_validate(c), 0);
	/* on the puppet's cpu freelist: objs[3] alone; the refill had
	 * objects sent back, so it builds no more of the slab (reuse first) */
	CHECK_EQ(ptr_to_slab(objs[0])->built, PER / 2);
	CHECK_EQ(ptr_to_slab(objs[0])->reuse_refills, 1);
	CHECK_LIVE(c, PER / 2 - 1, 1);
	/* the drained message went back to its sender, which fills it next */
	CHECK_EQ(mailbox_peek(&tls_heap->msg_returns), (uintptr_t)m);
	uslab_cache_free(c, objs[5]);
	CHECK(*heap_outbox(tls_heap, c->id) == m && m->count == 1 && m->obj[0] == objs[5]);
	CHECK_EQ(mailbox_peek(&tls_heap->msg_returns), 0);
	uslab_thread_flush();
	objs[5] = NULL;

	objs[3] = NULL;                               /* objs[4] is live again */
	other_do(job_free, c, objs, PER / 2);
	CHECK_EQ(uslab_cache_validate(c), 0);
	CHECK_EQ(uslab_cache_destroy(c), 0);
}

/* Objects sent back to two of the owner's slabs, its dry one and its active
 * one, come back in its one next refill, both on its cpu freelist: not one
 * slab's owner-local list a refill, with a new object built for the next. */
static void test_message_to_two_slabs(void)
{
	struct uslab_cache *c = uslab_cache_create("t-message-two", OBJ_SIZE, 0, 0, NULL);
	static void *objs[PER + PER / 2];
	void *again[2];

	REQUIRE(c != NULL);
	struct job *j = other_do(job_alloc, c, objs, PER + PER / 2);
	struct slab *dry = ptr_to_slab(objs[0]), *active = ptr_to_slab(objs[PER]);
	REQUIRE(j->snap.slab == active && j->snap.freelist == NULL);
	CHECK(dry->owner == active->owner && dry->owner != tls_heap);

	uslab_cache_free(c, objs[3]);                 /* one message, two runs */
	uslab_cache_free(c, objs[PER + 3]);
	uslab_thread_flush();
	other_do(job_alloc, c, again, 2);
	CHECK(again[0] == objs[PER + 3] && again[1] == objs[3]);
	CHECK_EQ(active->built, PER / 2);             /* nothing built for them */
	CHECK_EQ(uslab_cache_validate(c), 0);
	other_do(job_free, c, objs, PER + PER / 2);
	CHECK_EQ(uslab_cache_validate(c), 0);
	CHECK_EQ(uslab_cache_destroy(c), 0);
}

/* A message addressed to a thread that exits before it is sent: the exit
 * closes the inbox, and the sender frees the objects through their slab's
 * word instead. Destroy sends nobody's messages but frees them too. */
static void test_message_to_exited_thread(void)
{
	struct uslab_cache *c = uslab_cache_create("t-message-exit", OBJ_SIZE, 0, 0, NULL);
	static void *objs[PER / 2];
	struct puppet p2;

	REQUIRE(c != NULL);
	puppet_start(&p2);
	struct job j = { .c = c, .objs = objs, .n = PER / 2 };
	puppet_run(&p2, job_alloc, &j);
	struct slab *slab = ptr_to_slab(objs[0]);
	struct thread_heap *owner = slab->owner;
	CHECK(owner != NULL && owner != tls_heap);

	uslab_cache_free(c, objs[3]);
	uslab_cache_free(c, objs[4]);
	CHECK(*heap_outbox(tls_heap, c->id) != NULL && (*heap_outbox(tls_heap, c->id))->count == 2);
	puppet_stop(&p2);                             /* exit: slab released, inbox closed */
	CHECK_EQ(mailbox_peek(heap_inbox(owner, c->id)), MAILBOX_CLOSED);
	struct word w = word_of(objs[0]);
	CHECK(!w.frozen && w.on_partial && w.inuse == PER / 2);
	CHECK_EQ(uslab_cache_validate(c), 0);

	uslab_thread_flush();                         /* the send finds it closed */
	CHECK(*heap_outbox(tls_heap, c->id) == NULL);
	CHECK_EQ(mailbox_peek(heap_inbox(owner, c->id)), MAILBOX_CLOSED);
	w = word_of(objs[0]);
	CHECK_EQ(w.inuse, PER / 2 - 2);
	CHECK(w.freelist == objs[4] && fp_get(c, objs[4]) == objs[3]);   /* one run, one dwcas */
	CHECK_EQ(uslab_cache_validate(c), 0);
	CHECK_LIVE(c, PER / 2 - 2, 0);

	/* destroy with objects in a message nobody sent: they are freed */
	objs[3] = objs[4] = NULL;
	other_do(job_alloc, c, objs + 3, 2);           /* the live puppet owns a slab */
	void *rest[PER / 2];
	unsigned n = 0;
	for (int i = 0; i < PER / 2; i++)
		if (i != 3 && i != 4)
			rest[n++] = objs[i];
	for (unsigned i = 0; i < n; i++)
		uslab_cache_free(c, rest[i]);
	uslab_cache_free(c, objs[3]);
	uslab_cache_free(c, objs[4]);                 /* a message in this outbox */
	CHECK(*heap_outbox(tls_heap, c->id) != NULL);
	CHECK_EQ(uslab_cache_destroy(c), 0);
	CHECK(*heap_outbox(tls_heap, c->id) == NULL);
}

/*
 * A message filled for a heap whose thread exits, sent after another thread
 * has taken the heap over and never uses the cache: it waits in the open
 * inbox, and that thread's exit drains it (the heap keeps the cache among
 * the ids it visits, thread_heap.ids_used), the objects home by dwcas.
 */
static void test_message_to_recycled_heap(void)
{
	struct uslab_cache *c = uslab_cache_create("t-message-recycled", OBJ_SIZE, 0, 0, NULL);
	struct uslab_cache *d = uslab_cache_create("t-message-other", OBJ_SIZE, 0, 0, NULL);
	static void *objs[PER / 2], *dobj[1];
	enum { TRIES = 64 };
	static struct puppet p[TRIES + 1];
	unsigned k;

	REQUIRE(c != NULL && d != NULL);
	puppet_start(&p[0]);
	struct job j = { .c = c, .objs = objs, .n = PER / 2 };
	puppet_run(&p[0], job_alloc, &j);
	struct thread_heap *owner = j.heap;
	CHECK(owner != NULL && ptr_to_slab(objs[0])->owner == owner);
	uslab_cache_free(c, objs[3]);
	uslab_cache_free(c, objs[4]);                 /* a message to owner, unsent */
	puppet_stop(&p[0]);
	CHECK_EQ(mailbox_peek(heap_inbox(owner, c->id)), MAILBOX_CLOSED);

	/* threads that use only d until one gets owner's heap (a free heap is
	 * taken first come; the others hold theirs meanwhile) */
	struct job jd = { .c = d, .objs = dobj, .n = 1 };
	for (k = 1; k <= TRIES; k++) {
		puppet_start(&p[k]);
		puppet_run(&p[k], job_alloc, &jd);
		puppet_run(&p[k], job_free, &jd);
		if (jd.heap == owner)
			break;
	}
	REQUIRE(k <= TRIES);
	CHECK_EQ(mailbox_peek(heap_inbox(owner, c->id)), 0);   /* open again */

	uslab_thread_flush();                         /* the send finds it open */
	CHECK(*heap_outbox(tls_heap, c->id) == NULL);
	CHECK(mailbox_peek(heap_inbox(owner, c->id)) > MAILBOX_CLOSED);
	CHECK_LIVE(c, PER / 2 - 2, 2);                /* in the message: still out */
	for (unsigned i = k; i >= 1; i--)
		puppet_stop(&p[i]);
	/* the exit of the thread that had the heap drained and closed it */
	CHECK_EQ(mailbox_peek(heap_inbox(owner, c->id)), MAILBOX_CLOSED);
	struct word w = word_of(objs[0]);
	CHECK(!w.frozen && w.inuse == PER / 2 - 2);
	CHECK(w.freelist == objs[4] && fp_get(c, objs[4]) == objs[3]);
	CHECK_EQ(uslab_cache_validate(c), 0);
	CHECK_LIVE(c, PER / 2 - 2, 0);

	objs[3] = objs[4] = NULL;
	for (int i = 0; i < PER / 2; i++)
		if (objs[i])
			uslab_cache_free(c, objs[i]);
	CHECK_EQ(uslab_cache_destroy(c), 0);
	CHECK_EQ(uslab_cache_destroy(d), 0);
}

/*
 * A cache id used again by a cache with a smaller foreign budget: the cpu
 * slab's budget must start afresh. (It used to keep the old cache's: with
 * 1,024 left against a budget of 16, deactivate took the cached objects for
 * the active slab's and, with no active slab, dropped them.)
 */
static void job_alloc_exit(void *arg)
{
	job_alloc(arg);   /* the thread exits: its slabs are nobody's */
}

static void test_foreign_budget_after_id_reuse(void)
{
	struct uslab_cache *a = uslab_cache_create("t-budget-a", 8, 0, 0, NULL);
	static void *objs[8];
	struct job j = { .objs = objs, .n = 8 };

	REQUIRE(a != NULL && a->foreign_max > 64);
	j.c = a;
	run_in_thread(job_alloc_exit, &j);
	for (int i = 0; i < 8; i++)
		uslab_cache_free(a, objs[i]);            /* cached as foreign */
	uslab_thread_flush();                         /* budget back to a's */
	unsigned id = a->id;
	CHECK_EQ(uslab_cache_destroy(a), 0);

	struct uslab_cache *b = uslab_cache_create("t-budget-b", 16384, 0, 0, NULL);
	REQUIRE(b != NULL && b->id == id && b->foreign_max < 64);
	j.c = b;
	run_in_thread(job_alloc_exit, &j);
	for (int i = 0; i < 8; i++)
		uslab_cache_free(b, objs[i]);
	CHECK(this_cpu_slab(b)->foreign_left <= b->foreign_max);
	uslab_thread_flush();                         /* nothing may be dropped */
	CHECK_EQ(uslab_cache_validate(b), 0);
	CHECK_EQ(info_of(b).live_objects, 0);
	CHECK_EQ(uslab_cache_destroy(b), 0);
}

/* ---- shared refills: PARTIAL stays PARTIAL; PARTIAL -> FULL off the list; new -> PARTIAL --- */

/* The objects of chain p, into out[] from *n on (a chain's links are
 * written over once its objects are freed). */
static void collect(const struct uslab_cache *c, void *p, void **out, size_t *n)
{
	for (; p; p = fp_get(c, p))
		out[(*n)++] = p;
}

/* A shared refill takes a few objects of a partial slab, which stays
 * unfrozen on the list; one that would take its last free object takes
 * it off the list first and every free object with it (FULL); a free into
 * that FULL slab by a thread that may not freeze it lists it again. */
static void test_shared_take(void)
{
	struct uslab_cache *c = new_cache("t-shared-take");
	void *objs[PER], *taken[PER];
	size_t nt = 0;
	unsigned n;

	other_make_partial(c, objs, 1, 10);
	struct word w = word_of(objs[0]);
	REQUIRE(!w.frozen && w.on_partial && w.inuse == 10);
	void *chain = partial_take_shared(c, 16, &n);

	CHECK_EQ(n, 16);
	CHECK_EQ(chain_len(c, chain), 16);
	w = word_of(objs[0]);
	CHECK(!w.frozen && w.on_partial);
	CHECK_EQ(w.inuse, 26);
	CHECK_EQ(chain_len(c, w.freelist), PER - 26);
	CHECK_EQ(nr_partial(c), 1);
	CHECK(w.slab->owner == NULL && w.slab->owner_tp == 0);
	collect(c, chain, taken, &nt);
	/* more asked than it has: all of it, off the list */
	chain = partial_take_shared(c, PER, &n);
	CHECK_EQ(n, PER - 26);
	w = word_of(objs[0]);
	CHECK(!w.frozen && !w.on_partial && w.freelist == NULL);
	CHECK_EQ(w.inuse, PER);
	CHECK_EQ(nr_partial(c), 0);
	collect(c, chain, taken, &nt);
	CHECK_EQ(nt, PER - 10);
	/* nothing listed: no take */
	CHECK(partial_take_shared(c, 16, &n) == NULL && n == 0);
	/* FULL -> PARTIAL, listed, by a free that may not freeze */
	void *o = taken[--nt];

	CHECK(!__slab_free(c, w.slab, o, o, 1, false));
	w = word_of(objs[0]);
	CHECK(!w.frozen && w.on_partial && w.freelist == o);
	CHECK_EQ(w.inuse, PER - 1);
	CHECK_EQ(uslab_cache_validate(c), 0);
	for (size_t i = 0; i < nt; i++)
		uslab_cache_free(c, taken[i]);
	finish(c, objs, 10);
}

/* A shared refill with no partial slab: a new slab, built whole, its first
 * objects the caller's and the rest on the list, unfrozen. */
static void test_shared_new_slab(void)
{
	struct uslab_cache *c = new_cache("t-shared-new");
	void *taken[PER];
	size_t nt = 0;
	unsigned n;
	void *chain = slab_new_shared(c, 16, &n);

	REQUIRE(chain != NULL);
	CHECK_EQ(n, 16);
	CHECK_EQ(chain_len(c, chain), 16);
	struct word w = word_of(chain);

	CHECK((uintptr_t)chain == w.slab->base);
	CHECK(!w.frozen && w.on_partial);
	CHECK_EQ(w.inuse, 16);
	CHECK_EQ(w.slab->built, PER);
	CHECK_EQ(chain_len(c, w.freelist), PER - 16);
	CHECK(w.freelist == (char *)chain + 16 * c->stride);
	CHECK(w.slab->owner == NULL && w.slab->owner_tp == 0);
	CHECK_EQ(nr_partial(c), 1);
	collect(c, chain, taken, &nt);
	/* a slab no bigger than the request: all of it, FULL */
	chain = partial_take_shared(c, PER, &n);
	CHECK_EQ(n, PER - 16);
	collect(c, chain, taken, &nt);
	w = word_of(taken[0]);
	CHECK(!w.frozen && !w.on_partial && w.inuse == PER);
	CHECK_EQ(uslab_cache_validate(c), 0);
	finish(c, taken, nt);
}

int main(void)
{
	printf("dwcas path: %s\n", uslab_dwcas_path());
	puppet_start(&other);
	test_cpu_partial_option();
	test_new_slab_is_frozen();
	test_remote_free_while_owner_refills();
	test_flush_to_partial();
	test_flush_to_full();
	test_flush_exhausted_with_remote_frees();
	test_flush_to_empty_kept();
	test_flush_to_empty_discarded();
	test_flush_unbuilt_empty_discarded();
	test_flush_unbuilt_partial();
	test_full_remote_free_freezes();
	test_owner_local_frees();
	test_full_remote_free_without_heap();
	test_partial_list_order();
	test_bulk_free_full_slab();
	test_partial_to_empty();
	test_partial_to_frozen_on_refill();
	test_cpu_partial_overflow();
	test_dry_active_stays_frozen();
	test_dry_slab_remote_frees();
	test_cpu_partial_order();
	test_refill_in_address_order();
	test_refill_keeps_address_order();
	test_flush_dry_cpu_partial();
	test_dry_overflow_drains();
	test_exit_dry_full();
	test_thread_exit_unfreezes();
	test_remote_frees_by_message();
	test_message_to_two_slabs();
	test_message_to_exited_thread();
	test_message_to_recycled_heap();
	test_foreign_budget_after_id_reuse();
	test_shared_take();
	test_shared_new_slab();
	test_validate_sees_damage();
	puppet_stop(&other);
	return test_done("slab_transitions_unit");
}
