/* atomic_dwcas_unit - single-threaded semantics of dwcas on both paths. */
#include "test.h"
#include "dwcas.h"

#include <stdlib.h>

static void exercise(const char *path)
{
	static dword_t w;
	dword_t old = { 0, 0 }, nw = { 0x1234, 0xfeedfacecafebeefull };

	WRITE_ONCE(w.lo, 0);
	WRITE_ONCE(w.hi, 0);
	CHECK(dwcas_try_cmpxchg(&w, &old, nw));
	CHECK_EQ(w.lo, 0x1234);
	CHECK(w.hi == 0xfeedfacecafebeefull);

	/* a stale expectation fails and reports the current pair */
	old = (dword_t){ 0x1234, 0 };
	CHECK(!dwcas_try_cmpxchg(&w, &old, (dword_t){ 1, 1 }));
	CHECK_EQ(old.lo, 0x1234);
	CHECK(old.hi == 0xfeedfacecafebeefull);
	CHECK_EQ(w.lo, 0x1234);   /* untouched */

	/* only one half matching is a failure too */
	old = (dword_t){ 0, 0xfeedfacecafebeefull };
	CHECK(!dwcas_try_cmpxchg(&w, &old, (dword_t){ 1, 1 }));
	CHECK_EQ(old.lo, 0x1234);

	/* all-ones values in both halves survive */
	old = dwcas_read(&w);
	CHECK(dwcas_try_cmpxchg(&w, &old, (dword_t){ UINTPTR_MAX, UINTPTR_MAX }));
	dword_t s = dwcas_read_stable(&w);
	CHECK(s.lo == UINTPTR_MAX && s.hi == UINTPTR_MAX);
	printf("  path %s ok\n", path);
}

int main(void)
{
	const char *env = getenv("USLAB_DWCAS");

	_Static_assert(_Alignof(dword_t) == 16, "dword_t must be 16-byte aligned");
	CHECK(dwcas_path() != DWCAS_UNSET);
	if (env && env[0] == '0')
		CHECK(dwcas_path() == DWCAS_LOCKED);
#if defined(__x86_64__)
	else
		CHECK(dwcas_path() == DWCAS_NATIVE);
#endif
	exercise(dwcas_path_name());

	/* both paths, whatever the environment said */
	CHECK(dwcas_set_path(DWCAS_LOCKED));
	CHECK_EQ(dwcas_path(), DWCAS_LOCKED);
	exercise(dwcas_path_name());
	if (dwcas_native_available()) {
		CHECK(dwcas_set_path(DWCAS_NATIVE));
		exercise(dwcas_path_name());
	} else {
		test_skip("no native double-width CAS on this CPU: the native path is not checked");
	}
	CHECK(!dwcas_set_path(DWCAS_UNSET));
	return test_done("atomic_dwcas_unit");
}
