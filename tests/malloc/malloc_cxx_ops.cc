// SPDX-License-Identifier: MIT
/*
 * malloc_cxx_ops.cc - the drop-in library's own C++ operators: every form of
 * operator new and delete resolves to libuslab-malloc.so (dladdr), each
 * returns usable, aligned memory that its delete takes back (sized,
 * aligned, nothrow, arrays); a failed new calls the new handler until it
 * gives up, then throws std::bad_alloc, and the nothrow forms return
 * nullptr.
 *
 * USLAB_TEST_ALLOW_GLIBC=1 runs it without the preload (libstdc++'s
 * operators; the dladdr checks are then left out).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define USLAB_TEST_PRELOAD
#include "test.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <new>

static bool on_uslab;

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

static void test_resolution(void)
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

static void test_forms(void)
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

static void test_failure(void)
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
	test_resolution();
	test_forms();
	test_failure();
	return test_done("malloc_cxx_ops");
}
