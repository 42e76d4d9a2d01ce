// SPDX-License-Identifier: MIT
/*
 * malloc_cxx.cc - C++ new/delete on uslab: every form of operator new and
 * delete resolves to libuslab-malloc.so's own (dladdr); objects and arrays,
 * aligned new (alignas(64), alignas(256), alignas(4096)), sized and
 * aligned-sized delete, nothrow new, bad_alloc after the new handler gives
 * up, and standard containers that grow in one thread and are destroyed in
 * another.
 *
 * Four threads form a ring: each builds vectors, strings and maps, hands
 * them to the next thread through a queue, and checks, grows and destroys
 * whatever it receives from the previous one.
 *
 * USLAB_TEST_ALLOW_GLIBC=1 runs it without the preload (against glibc).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define USLAB_TEST_PRELOAD
#include "test.h"

#include <malloc.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <dlfcn.h>
#include <initializer_list>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

static bool on_uslab;


static bool is_aligned(const void *p, size_t a)
{
	return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0;
}

/* ---- objects, arrays, aligned and sized forms ---------------------------------- */

static std::atomic<long> live_objects;

struct Obj {
	uint64_t tag;
	char name[40];
	Obj() : tag(0x0b1ec7ull) { live_objects++; snprintf(name, sizeof(name), "obj-%p", (void *)this); }
	~Obj() { tag = 0; live_objects--; }
	bool ok() const
	{
		char want[40];
		snprintf(want, sizeof(want), "obj-%p", (const void *)this);
		return tag == 0x0b1ec7ull && strcmp(name, want) == 0;
	}
};

struct alignas(64) Line {
	char bytes[100];
	Line() { memset(bytes, 0x64, sizeof(bytes)); live_objects++; }
	~Line() { live_objects--; }
};

struct alignas(4096) Page {
	char bytes[5000];
	Page() { memset(bytes, 0x40, sizeof(bytes)); live_objects++; }
	~Page() { live_objects--; }
};

static void check_usable(const void *p, size_t n, const char *what)
{
	if (!on_uslab)
		return;
	/* malloc_usable_size aborts on a pointer uslab does not own: this
	 * proves operator new went through uslab */
	size_t u = malloc_usable_size(const_cast<void *>(p));
	if (u < n) {
		fprintf(stderr, "%s: usable %zu < %zu\n", what, u, n);
		test_failures++;
	}
}

static void test_objects()
{
	std::vector<Obj *> objs;
	for (int i = 0; i < 1000; i++) {
		objs.push_back(new Obj);
		check_usable(objs.back(), sizeof(Obj), "new Obj");
	}
	for (Obj *o : objs)
		CHECK(o->ok());
	for (Obj *o : objs)
		delete o;
	CHECK_EQ(live_objects.load(), 0);

	for (size_t n : { 0, 1, 7, 100, 5000, 100000 }) {
		Obj *a = new Obj[n];
		for (size_t i = 0; i < n; i++)
			CHECK(a[i].ok());
		CHECK_EQ(live_objects.load(), (long)n);
		delete[] a;
		CHECK_EQ(live_objects.load(), 0);

		unsigned char *raw = new unsigned char[n + 1];
		check_usable(raw, n + 1, "new unsigned char[]");
		memset(raw, 0xEE, n + 1);
		delete[] raw;
	}
}

static void test_aligned_new()
{
	std::vector<Line *> lines;
	std::vector<Page *> pages;
	for (int i = 0; i < 200; i++) {
		lines.push_back(new Line);
		if (!is_aligned(lines.back(), 64)) {
			fprintf(stderr, "new Line (alignas 64) = %p\n", (void *)lines.back());
			test_failures++;
		}
		check_usable(lines.back(), sizeof(Line), "new Line");
		if (i % 4 == 0) {
			pages.push_back(new Page);
			if (!is_aligned(pages.back(), 4096)) {
				fprintf(stderr, "new Page (alignas 4096) = %p\n", (void *)pages.back());
				test_failures++;
			}
			check_usable(pages.back(), sizeof(Page), "new Page");
		}
	}
	for (Line *l : lines)
		CHECK(l->bytes[0] == 0x64 && l->bytes[99] == 0x64);
	for (Page *p : pages)
		CHECK(p->bytes[0] == 0x40 && p->bytes[4999] == 0x40);
	for (Line *l : lines)
		delete l;   /* sized + aligned delete */
	for (Page *p : pages)
		delete p;

	Line *la = new Line[7];
	CHECK(is_aligned(la, 64));
	delete[] la;
	Page *pa = new Page[3];
	CHECK(is_aligned(pa, 4096));
	for (int i = 0; i < 3; i++)
		CHECK(is_aligned(&pa[i], 4096) && pa[i].bytes[4999] == 0x40);
	delete[] pa;
	CHECK_EQ(live_objects.load(), 0);

	/* the operator functions themselves, every form */
	for (size_t al = 16; al <= (size_t)1 << 22; al *= 4) {
		std::align_val_t a{ al };
		void *p = ::operator new(300, a);
		CHECK(is_aligned(p, al));
		memset(p, 1, 300);
		::operator delete(p, 300, a);
		p = ::operator new[](3000, a);
		CHECK(is_aligned(p, al));
		memset(p, 2, 3000);
		::operator delete[](p, 3000, a);
		p = ::operator new(50, a, std::nothrow);
		CHECK(p && is_aligned(p, al));
		::operator delete(p, a);
	}
	for (size_t n : { 1, 24, 1000, 40000, 3 << 20 }) {
		void *p = ::operator new(n);
		memset(p, 3, n);
		::operator delete(p, n);   /* sized delete */
		p = ::operator new[](n, std::nothrow);
		CHECK(p != nullptr);
		memset(p, 4, n);
		::operator delete[](p, n);
	}

	/* out of memory: bad_alloc, or nullptr from the nothrow form */
	bool threw = false;
	try {
		volatile size_t huge = (size_t)PTRDIFF_MAX;
		void *p = ::operator new(huge);
		::operator delete(p);
	} catch (const std::bad_alloc &) {
		threw = true;
	}
	CHECK(threw);
	volatile size_t huge = SIZE_MAX / 2;
	CHECK(::operator new(huge, std::nothrow) == nullptr);
	CHECK(::operator new(huge, std::align_val_t{ 64 }, std::nothrow) == nullptr);
}

/* ---- containers passed between threads ----------------------------------------- */

struct Parcel {
	int from, seq;
	std::vector<uint64_t> vec;
	std::string str;
	std::map<int, std::string> map;
	std::unique_ptr<Line> line;
	std::unique_ptr<Page> page;
};

static uint64_t vec_value(int from, int seq, size_t i)
{
	return ((uint64_t)from << 56) ^ ((uint64_t)seq << 24) ^ (i * 2654435761u);
}

static std::string map_value(int seq, int key)
{
	std::string s = "value-" + std::to_string(seq) + "-" + std::to_string(key);
	s.append((size_t)(key % 97), (char)('a' + key % 26));
	return s;
}

static std::unique_ptr<Parcel> build(int from, int seq, uint64_t *rs)
{
	auto p = std::make_unique<Parcel>();
	p->from = from;
	p->seq = seq;
	size_t n = test_rand(rs) % 5000;
	for (size_t i = 0; i < n; i++)   /* grows by doubling: many reallocs */
		p->vec.push_back(vec_value(from, seq, i));
	size_t m = test_rand(rs) % 3000;
	for (size_t i = 0; i < m; i++)
		p->str += (char)('A' + (seq + i) % 26);
	int keys = (int)(test_rand(rs) % 200);
	for (int k = 0; k < keys; k++)
		p->map[k * 7] = map_value(seq, k * 7);
	if (seq % 3 == 0)
		p->line = std::make_unique<Line>();
	if (seq % 17 == 0)
		p->page = std::make_unique<Page>();
	return p;
}

static bool verify(const Parcel &p)
{
	for (size_t i = 0; i < p.vec.size(); i++)
		if (p.vec[i] != vec_value(p.from, p.seq, i))
			return false;
	for (size_t i = 0; i < p.str.size(); i++)
		if (p.str[i] != (char)('A' + (p.seq + i) % 26))
			return false;
	for (const auto &kv : p.map)
		if (kv.first % 7 || kv.second != map_value(p.seq, kv.first))
			return false;
	if (p.line && (!is_aligned(p.line.get(), 64) || p.line->bytes[50] != 0x64))
		return false;
	if (p.page && (!is_aligned(p.page.get(), 4096) || p.page->bytes[4000] != 0x40))
		return false;
	return true;
}

struct Queue {
	std::mutex mu;
	std::condition_variable cv;
	std::deque<std::unique_ptr<Parcel>> q;
	bool closed = false;

	void push(std::unique_ptr<Parcel> p)
	{
		std::lock_guard<std::mutex> g(mu);
		q.push_back(std::move(p));
		cv.notify_one();
	}
	/* nullptr once closed and drained */
	std::unique_ptr<Parcel> pop()
	{
		std::unique_lock<std::mutex> g(mu);
		cv.wait(g, [this] { return !q.empty() || closed; });
		if (q.empty())
			return nullptr;
		auto p = std::move(q.front());
		q.pop_front();
		return p;
	}
	size_t size()
	{
		std::lock_guard<std::mutex> g(mu);
		return q.size();
	}
	void close()
	{
		std::lock_guard<std::mutex> g(mu);
		closed = true;
		cv.notify_all();
	}
};

enum { NTHREADS = 4, PER_THREAD = 3000 };

static Queue queues[NTHREADS];
static std::atomic<int> bad_parcels, received;

static void ring_worker(int id)
{
	uint64_t rs = 0x1234567ull + (uint64_t)id * 7919;
	Queue &out = queues[(id + 1) % NTHREADS];
	Queue &in = queues[id];

	for (int seq = 0; seq < PER_THREAD; seq++) {
		out.push(build(id, seq, &rs));
		/* take what the previous thread built: check, grow, then destroy
		 * it here (or, one time in four, forward it once more) */
		while (in.size() > 8) {
			auto p = in.pop();
			if (!verify(*p))
				bad_parcels++;
			received++;
			for (int k = 0; k < 100; k++)
				p->vec.push_back(vec_value(p->from, p->seq, p->vec.size()));
			p->str.append(50, 'x');
			p->str.resize(p->str.size() - 50);
			p->map.erase(0);
			p->map.clear();
			if (!verify(*p))
				bad_parcels++;
			/* a few travel on (at most around the ring once) */
			if (p->seq % 4 == 1 && p->from != (id + 1) % NTHREADS)
				out.push(std::move(p));
		}
	}
}

static void test_threads()
{
	std::vector<std::thread> t;
	double t0 = test_now();

	for (int i = 0; i < NTHREADS; i++)
		t.emplace_back(ring_worker, i);
	for (auto &th : t)
		th.join();
	/* destroy the leftovers here, in yet another thread (main) */
	for (auto &q : queues) {
		q.close();
		while (auto p = q.pop()) {
			if (!verify(*p))
				bad_parcels++;
			received++;
		}
	}
	CHECK_EQ(bad_parcels.load(), 0);
	CHECK(received.load() >= NTHREADS * PER_THREAD);
	CHECK_EQ(live_objects.load(), 0);
	printf("  threads: %d parcels in %.2f s\n", received.load(), test_now() - t0);
}

/* ---- the library's own operators --------------------------------------------------- */

static void check_from_uslab(const char *mangled)
{
	void *sym = dlsym(RTLD_DEFAULT, mangled);
	Dl_info where;

	REQUIRE(sym != nullptr);
	REQUIRE(dladdr(sym, &where) && where.dli_fname);
	if (!strstr(where.dli_fname, "libuslab-malloc")) {
		fprintf(stderr, "%s comes from %s, not libuslab-malloc.so\n", mangled, where.dli_fname);
		test_failures++;
	}
}

static void test_own_operators(void)
{
	static const char *const ops[] = {
		"_Znwm", "_Znam", "_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t",
		"_ZnwmSt11align_val_t", "_ZnamSt11align_val_t",
		"_ZnwmSt11align_val_tRKSt9nothrow_t", "_ZnamSt11align_val_tRKSt9nothrow_t",
		"_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm", "_ZdlPvRKSt9nothrow_t", "_ZdaPvRKSt9nothrow_t",
		"_ZdlPvSt11align_val_t", "_ZdaPvSt11align_val_t", "_ZdlPvmSt11align_val_t",
		"_ZdaPvmSt11align_val_t", "_ZdlPvSt11align_val_tRKSt9nothrow_t",
		"_ZdaPvSt11align_val_tRKSt9nothrow_t",
	};

	if (!on_uslab)
		return;
	for (const char *op : ops)
		check_from_uslab(op);
}

struct alignas(256) wide {
	unsigned char b[300];
};

static void test_every_form(void)
{
	for (size_t n : { 1ul, 24ul, 1000ul, 40000ul, 3ul << 20 }) {
		auto *p = static_cast<unsigned char *>(::operator new(n));
		memset(p, 0x11, n);
		::operator delete(p, n);   // sized
		auto *a = static_cast<unsigned char *>(::operator new[](n, std::nothrow));
		REQUIRE(a != nullptr);
		memset(a, 0x22, n);
		::operator delete[](a);
		for (size_t al : { 32ul, 256ul, 4096ul, 65536ul }) {
			void *q = ::operator new(n, std::align_val_t(al));
			CHECK_EQ((uintptr_t)q % al, 0);
			memset(q, 0x33, n);
			if (n & 1)
				::operator delete(q, n, std::align_val_t(al));   // sized and aligned
			else
				::operator delete(q, std::align_val_t(al));
			q = ::operator new[](n, std::align_val_t(al), std::nothrow);
			REQUIRE(q != nullptr);
			CHECK_EQ((uintptr_t)q % al, 0);
			::operator delete[](q, std::align_val_t(al), std::nothrow);
		}
	}
	wide *w = new wide[7];   // over-aligned type: the aligned array forms
	CHECK_EQ((uintptr_t)w % alignof(wide), 0);
	memset(w, 0x44, sizeof(wide) * 7);
	delete[] w;
}

static int handler_calls;

static void handler()
{
	if (++handler_calls == 3)
		std::set_new_handler(nullptr);   // gives up: the next failure throws
}

static void test_new_handler(void)
{
	const size_t too_big = SIZE_MAX / 2;
	bool thrown = false;

	CHECK(::operator new(too_big, std::nothrow) == nullptr);
	CHECK(::operator new[](too_big, std::align_val_t(64), std::nothrow) == nullptr);
	std::set_new_handler(handler);
	try {
		void *volatile p = ::operator new(too_big);
		(void)p;
	} catch (const std::bad_alloc &) {
		thrown = true;
	}
	CHECK(thrown);
	CHECK_EQ(handler_calls, 3);   // called until it removed itself
}

int main()
{
	on_uslab = test_require_uslab() != 0;
	test_own_operators();
	test_every_form();
	test_new_handler();
	test_objects();
	test_aligned_new();
	test_threads();
	return test_done("malloc_cxx");
}
