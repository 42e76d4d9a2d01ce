#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# cache_memcheck.sh PROG - valgrind's memcheck sees misuse of uslab_cache
# objects: each case of PROG (cache_memcheck_prog) under memcheck must give
# the report it stands for, and the clean run none. Skips (77) without
# valgrind, or when the library was built without valgrind's headers.
set -uo pipefail
prog=$1
command -v valgrind >/dev/null || { echo "SKIP: valgrind is not installed"; exit 77; }
[ -f /usr/include/valgrind/memcheck.h ] ||
	{ echo "SKIP: no valgrind headers: the library has no memcheck requests"; exit 77; }
fail=0
# case  the line memcheck must print
expect() {
	local out
	out=$(valgrind --error-exitcode=99 --leak-check=full "$prog" "$1" 2>&1)
	local rc=$?
	if [ "$rc" -ne 99 ] || ! grep -q -- "$2" <<<"$out"; then
		echo "FAIL: $1: want exit 99 and \"$2\", got exit $rc:"
		sed 's/^/  /' <<<"$out" | tail -20
		fail=1
	else
		echo "ok: $1: $2"
	fi
}
expect read-after-free "Invalid read of size 1"
expect write-after-free "Invalid write of size 1"
expect overflow "Invalid read of size 1"
expect uninit "Conditional jump or move depends on uninitialised value"
# no error, and what memcheck says of the heap at exit
expect_clean() {
	local out
	out=$(valgrind --error-exitcode=99 "$prog" "$1" 2>&1)
	local rc=$?
	if [ "$rc" -ne 0 ] || ! grep -q -- "$2" <<<"$out"; then
		echo "FAIL: $1: want exit 0 and \"$2\", got exit $rc:"
		sed 's/^/  /' <<<"$out" | tail -20
		fail=1
	else
		echo "ok: $1: $2"
	fi
}
expect_clean leak "in use at exit: 40 bytes in 1 blocks"
expect_clean clean "All heap blocks were freed"
exit $fail
