/* SPDX-License-Identifier: MIT */
/*
 * fuzz_cache - the object-cache API against a shadow model.
 *
 * The input is a sequence of operations on 4 cache slots and 256 object
 * slots: uslab_cache_create (sizes from 1 byte to 1 MiB, alignments,
 * flags, with or without a constructor, and arguments that must be
 * refused), alloc, free, alloc_bulk, free_bulk, destroy, shrink, validate,
 * info, a free or an allocation on a helper thread (remote frees both ways)
 * and thread flushes.
 *
 * Checked after every operation:
 *   - create refuses exactly the arguments uslab.h says (EINVAL) and
 *     object_size/name are as asked;
 *   - objects are aligned, inside no other live object of any cache, and
 *     keep their pattern until freed; a constructor cache hands objects
 *     out in their constructed state;
 *   - destroy returns -EBUSY while the model has live objects of the cache
 *     (and the cache goes on working), 0 once it has none;
 *   - validate finds nothing; info counts at least the model's live objects
 *     (objects in another thread's messages count as live).
 */
#define _GNU_SOURCE
#include "fuzz.h"
#include "uslab.h"

#include <errno.h>

#define CACHES 4
#define OBJS 256
#define BULK_MAX 64
#define LIVE_BYTES_MAX (96 * MiB)
#define CTOR_MAGIC 0xC7C7A5A5F00DBEEFull

struct cache_slot {
	struct uslab_cache *c;
	size_t size, align, object_size;
	bool ctor;
	unsigned live;
};

struct obj {
	uint8_t *p;
	unsigned cache;   /* its cache slot */
	uint64_t seed;
};

static struct cache_slot caches[CACHES];
static struct obj objs[OBJS];
static size_t live_bytes;
static uint64_t seed_counter;

/* The constructor's mark: the object's first word (a cache with a
 * constructor keeps its free pointer after the object, not in it). */
static uint64_t ctor_word(const void *obj)
{
	return CTOR_MAGIC ^ (uintptr_t)obj;
}

static void ctor(void *obj)
{
	uint64_t w = ctor_word(obj);

	memcpy(obj, &w, sizeof(w));
}

/* ---- the model ---------------------------------------------------------------------------- */

static bool has_ctor_word(const struct cache_slot *cs)
{
	return cs->ctor && cs->size >= 8;
}

FUZZ_NO_COVERAGE
static void check_no_overlap(unsigned self)
{
	const struct obj *o = &objs[self];
	size_t n = caches[o->cache].object_size;

	for (unsigned i = 0; i < OBJS; i++) {
		const struct obj *x = &objs[i];
		if (i == self || !x->p)
			continue;
		size_t m = caches[x->cache].object_size;
		if (o->p < x->p + m && x->p < o->p + n)
			fuzz_fail("object %p (%zu bytes, cache %u) overlaps live object %p (%zu bytes, "
				  "cache %u)", (void *)o->p, n, o->cache, (void *)x->p, m, x->cache);
	}
}

/* A new object of cache slot k in object slot s (empty). */
static void took(unsigned s, unsigned k, void *p, const char *how)
{
	struct cache_slot *cs = &caches[k];
	struct obj *o = &objs[s];

	FUZZ_CHECK(p != NULL, "%s(%s) returned NULL (errno %d)", how, uslab_cache_name(cs->c),
		   errno);
	size_t align = cs->align ? cs->align : cs->size >= 16 ? 16 : 8;
	FUZZ_CHECK((uintptr_t)p % align == 0, "%s(%s) returned %p, not aligned to %zu", how,
		   uslab_cache_name(cs->c), p, align);
	if (has_ctor_word(cs)) {
		uint64_t w;
		memcpy(&w, p, sizeof(w));
		FUZZ_CHECK(w == ctor_word(p), "%s(%s): %p is not in its constructed state", how,
			   uslab_cache_name(cs->c), p);
	}
	*o = (struct obj){ p, k, ++seed_counter };
	check_no_overlap(s);
	/* a constructor cache's objects keep the constructor's word */
	size_t from = has_ctor_word(cs) ? 8 : 0;
	pattern_fill_range(p, from, cs->size, cs->size, o->seed);
	cs->live++;
	live_bytes += cs->object_size;
}

/* Check object slot s before it goes back, and forget it. */
static void *giving_up(unsigned s, const char *how)
{
	struct obj *o = &objs[s];
	struct cache_slot *cs = &caches[o->cache];
	void *p = o->p;
	size_t from = has_ctor_word(cs) ? 8 : 0;

	size_t bad = pattern_check_from(p, from, cs->size, cs->size, o->seed);
	FUZZ_CHECK(bad == cs->size, "object %p of %s: byte %zu changed while live (seen before %s)",
		   p, uslab_cache_name(cs->c), bad, how);
	if (has_ctor_word(cs)) {
		uint64_t w;
		memcpy(&w, p, sizeof(w));
		FUZZ_CHECK(w == ctor_word(p), "object %p of %s lost its constructed word", p,
			   uslab_cache_name(cs->c));
	}
	cs->live--;
	live_bytes -= cs->object_size;
	memset(o, 0, sizeof(*o));
	return p;
}

static int free_obj_slot(void)
{
	for (unsigned i = 0; i < OBJS; i++)
		if (!objs[i].p)
			return (int)i;
	return -1;
}

/* ---- the helper thread's operations -------------------------------------------------------- */

struct remote_op {
	struct uslab_cache *c;
	void *p;
};

static void remote_free(void *arg)
{
	struct remote_op *op = arg;

	uslab_cache_free(op->c, op->p);
}

static void remote_alloc(void *arg)
{
	struct remote_op *op = arg;

	op->p = uslab_cache_alloc(op->c);
}

static void remote_flush(void *arg)
{
	(void)arg;
	uslab_thread_flush();
}

/* ---- create -------------------------------------------------------------------------------- */

static size_t pick_object_size(struct fuzz_in *in)
{
	uint8_t kind = in_u8(in);
	uint32_t r = in_u32(in);

	if (kind < 140)
		return 1 + r % 256;
	if (kind < 220)
		return 1 + r % 4096;
	if (kind < 245)
		return 1 + r % (64 * KiB);
	if (kind < 252)
		return 1 + r % MiB;
	static const size_t edges[] = { 0, 1, MiB, MiB + 1, SIZE_MAX, 8, 16, 4096, 16384 };
	return edges[r % (sizeof(edges) / sizeof(edges[0]))];
}

static void op_create(unsigned k, struct fuzz_in *in)
{
	struct cache_slot *cs = &caches[k];

	if (cs->c)
		return;
	size_t size = pick_object_size(in);
	uint8_t a = in_u8(in), f = in_u8(in);
	size_t align = a < 128 ? 0 : a < 240 ? (size_t)1 << (a % 13) : (size_t)(a % 16) * 3;
	unsigned flags = f & 3;
	bool with_ctor = f & 4;
	bool valid = size >= 1 && size <= MiB &&
		     (align == 0 || (!(align & (align - 1)) && align <= 4096));
	char name[32];

	snprintf(name, sizeof(name), "fuzz%u-%zu", k, size);
	errno = 0;
	struct uslab_cache *c = uslab_cache_create(name, size, align, flags, with_ctor ? ctor : NULL);
	if (!valid) {
		FUZZ_CHECK(c == NULL && errno == EINVAL,
			   "uslab_cache_create(size %zu, align %zu) should fail with EINVAL: %p, errno %d",
			   size, align, (void *)c, errno);
		return;
	}
	FUZZ_CHECK(c != NULL, "uslab_cache_create(size %zu, align %zu, flags %u%s) failed, errno %d",
		   size, align, flags, with_ctor ? ", ctor" : "", errno);
	FUZZ_CHECK(strcmp(uslab_cache_name(c), name) == 0, "cache name '%s', not '%s'",
		   uslab_cache_name(c), name);
	size_t os = uslab_cache_object_size(c);
	FUZZ_CHECK(os >= size && (!align || os % align == 0),
		   "object size %zu for size %zu, align %zu", os, size, align);
	for (unsigned i = 0; i < CACHES; i++)
		FUZZ_CHECK(i == k || caches[i].c != c, "uslab_cache_create returned live cache %p",
			   (void *)c);
	*cs = (struct cache_slot){ c, size, align, os, with_ctor, 0 };
}

/* ---- the rest ----------------------------------------------------------------------------- */

static void op_destroy(unsigned k)
{
	struct cache_slot *cs = &caches[k];

	if (!cs->c)
		return;
	int rc = uslab_cache_destroy(cs->c);
	if (cs->live) {
		FUZZ_CHECK(rc == -EBUSY, "destroy of %s with %u live objects returned %d",
			   uslab_cache_name(cs->c), cs->live, rc);
		return;
	}
	FUZZ_CHECK(rc == 0, "destroy of %s with no live objects returned %d",
		   uslab_cache_name(cs->c), rc);
	memset(cs, 0, sizeof(*cs));
}

static void op_free_bulk(unsigned k, struct fuzz_in *in)
{
	struct cache_slot *cs = &caches[k];
	void *batch[BULK_MAX];
	size_t n = 0, want = 1 + in_u8(in) % BULK_MAX;
	unsigned start = in_u8(in);

	if (!cs->c)
		return;
	for (unsigned i = 0; i < OBJS && n < want; i++) {
		unsigned s = (start + i) % OBJS;
		if (objs[s].p && objs[s].cache == k)
			batch[n++] = giving_up(s, "uslab_cache_free_bulk");
	}
	if (n < BULK_MAX && (in_u8(in) & 1)) {   /* a NULL among them is ignored */
		unsigned at = in_u8(in) % (n + 1);
		batch[n++] = batch[at];
		batch[at] = NULL;
	}
	uslab_cache_free_bulk(cs->c, n, batch);
}

static void step(struct fuzz_in *in)
{
	uint8_t b = in_u8(in);
	/* validate (9) and the flushes (12, 13) walk or empty whole caches: rarely */
	uint8_t op = b < 232 ? (b % 12 == 9 ? 1 : b % 12) : 8 + b % 6;
	unsigned k = in_u8(in) % CACHES, s = in_u8(in) % OBJS;
	struct cache_slot *cs = &caches[k];
	struct obj *o = &objs[s];

	switch (op) {
	case 0:
		op_create(k, in);
		break;
	case 1:
	case 2:   /* alloc, twice as often */
		if (!cs->c || live_bytes + cs->object_size > LIVE_BYTES_MAX)
			break;
		if (o->p)
			uslab_cache_free(caches[o->cache].c, giving_up(s, "uslab_cache_free"));
		took(s, k, uslab_cache_alloc(cs->c), "uslab_cache_alloc");
		break;
	case 3:
	case 4:
		if (o->p)
			uslab_cache_free(caches[o->cache].c, giving_up(s, "uslab_cache_free"));
		break;
	case 5: {
		void *batch[BULK_MAX];
		size_t n = 1 + in_u8(in) % BULK_MAX;
		if (!cs->c || live_bytes + n * cs->object_size > LIVE_BYTES_MAX)
			break;
		size_t got = uslab_cache_alloc_bulk(cs->c, n, batch);
		FUZZ_CHECK(got == n, "uslab_cache_alloc_bulk(%s, %zu) returned %zu",
			   uslab_cache_name(cs->c), n, got);
		for (size_t i = 0; i < n; i++) {
			int free_slot = free_obj_slot();
			if (free_slot < 0) {   /* no room in the model: give the rest back */
				uslab_cache_free_bulk(cs->c, n - i, batch + i);
				break;
			}
			took((unsigned)free_slot, k, batch[i], "uslab_cache_alloc_bulk");
		}
		break;
	}
	case 6:
		op_free_bulk(k, in);
		break;
	case 7:
		if (cs->c && (!cs->live || (in_u8(in) & 7) == 0))   /* -EBUSY now and then */
			op_destroy(k);
		break;
	case 8:
		if (cs->c)
			uslab_cache_shrink(cs->c);
		break;
	case 9:
		if (cs->c) {
			FUZZ_CHECK(uslab_cache_validate(cs->c) == 0, "validate of %s found problems",
				   uslab_cache_name(cs->c));
			struct uslab_cache_info info;
			FUZZ_CHECK(uslab_cache_info(cs->c, &info) == 0, "uslab_cache_info failed");
			FUZZ_CHECK(info.live_objects >= cs->live && info.object_size == cs->object_size,
				   "info of %s: %zu live objects (model: %u), object size %zu",
				   uslab_cache_name(cs->c), info.live_objects, cs->live, info.object_size);
		}
		break;
	case 10:
		if (o->p) {
			struct remote_op r = { caches[o->cache].c, NULL };
			r.p = giving_up(s, "a free on the helper thread");
			helper_run(remote_free, &r);
			if (in_u8(in) & 1)
				helper_run(remote_flush, NULL);
		}
		break;
	case 11:
		if (!cs->c || live_bytes + cs->object_size > LIVE_BYTES_MAX)
			break;
		if (o->p)
			uslab_cache_free(caches[o->cache].c, giving_up(s, "uslab_cache_free"));
		struct remote_op r = { cs->c, NULL };
		helper_run(remote_alloc, &r);
		took(s, k, r.p, "uslab_cache_alloc (helper thread)");
		break;
	case 12:
		uslab_thread_flush();
		break;
	default:
		helper_run(remote_flush, NULL);
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };

	fuzz_name = "fuzz_cache";
	while (in.n)
		step(&in);
	for (unsigned s = 0; s < OBJS; s++)
		if (objs[s].p) {
			struct uslab_cache *c = caches[objs[s].cache].c;
			uslab_cache_free(c, giving_up(s, "the end of the input"));
		}
	for (unsigned k = 0; k < CACHES; k++) {
		if (!caches[k].c)
			continue;
		FUZZ_CHECK(uslab_cache_validate(caches[k].c) == 0, "validate of %s found problems",
			   uslab_cache_name(caches[k].c));
		op_destroy(k);
		FUZZ_CHECK(!caches[k].c, "a cache with no live objects was not destroyed");
	}
	FUZZ_CHECK(live_bytes == 0, "the model lost count: %zu bytes live", live_bytes);
	return 0;
}
