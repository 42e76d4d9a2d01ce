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
# expect CASE RC LINE [VALGRIND-OPTION...] - memcheck on CASE must exit RC
# (99: it found an error) and print LINE
expect() {
	local case=$1 rc=$2 line=$3 out got
	shift 3
	out=$(valgrind --error-exitcode=99 "$@" "$prog" "$case" 2>&1)
	got=$?
	if [ "$got" -ne "$rc" ] || ! grep -q -- "$line" <<<"$out"; then
		echo "FAIL: $case: want exit $rc and \"$line\", got exit $got:"
		sed 's/^/  /' <<<"$out" | tail -20
		fail=1
	else
		echo "ok: $case: $line"
	fi
}
expect read-after-free 99 "Invalid read of size 1" --leak-check=full
expect write-after-free 99 "Invalid write of size 1" --leak-check=full
expect overflow 99 "Invalid read of size 1" --leak-check=full
expect uninit 99 "Conditional jump or move depends on uninitialised value" --leak-check=full
# no error, and what memcheck says of the heap at exit
expect leak 0 "in use at exit: 40 bytes in 1 blocks"
expect clean 0 "All heap blocks were freed"
exit $fail
