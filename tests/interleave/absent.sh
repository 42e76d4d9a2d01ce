#!/usr/bin/env bash
# tests/interleave/absent.sh HOOKED LIB... - the interleaving hook is in the
# test library HOOKED (so the check below can see it), and in no LIB: the
# libraries programs link are built without INTERLEAVE() points.
set -euo pipefail
hooked=$1
shift
syms=$(nm "$hooked")
grep -qw uslab_interleave_hook <<<"$syms" ||
	{ echo "FAIL: $hooked has no uslab_interleave_hook: this check would see nothing"; exit 1; }
for lib in "$@"; do
	syms=$(nm "$lib")   # fails (and so does the test) if nm cannot read it
	if grep -w uslab_interleave_hook <<<"$syms"; then
		echo "FAIL: $lib has the interleaving hook"
		exit 1
	fi
done
echo "interleave_absent: ok (the hook is in $(basename "$hooked") and in none of $# libraries)"
