#!/usr/bin/env bash
# tests/layers.sh SOURCE_DIR BUILD_DIR - the layering holds (tools/check-layers
# on the tree and on the library's objects), and the checker is no rubber
# stamp: an upward include and a raw atomic planted in a copy make it fail.
set -euo pipefail
src=$1 build=$2
"$src/tools/check-layers" --objects "$build"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$src/allocator" "$tmp/"
echo '#include "kmalloc.h"' >>"$tmp/allocator/slab/slab.c"
if out=$("$src/tools/check-layers" --root "$tmp" 2>&1); then
	echo "FAIL: check-layers passed a slab file that includes the malloc layer's header"
	exit 1
fi
grep -q "slab/slab.c:.*includes kmalloc.h of layer 'malloc'" <<<"$out" ||
	{ echo "FAIL: check-layers did not name the upward include: $out"; exit 1; }
echo 'static int x_; static int f_(void) { return __atomic_load_n(&x_, 0); }' \
	>"$tmp/allocator/platform/raw.c"
sed -i '/kmalloc.h/d' "$tmp/allocator/slab/slab.c"
if out=$("$src/tools/check-layers" --root "$tmp" 2>&1); then
	echo "FAIL: check-layers passed a raw __atomic builtin outside the toolkit"
	exit 1
fi
grep -q "platform/raw.c:1: raw atomic builtin" <<<"$out" ||
	{ echo "FAIL: check-layers did not name the raw atomic: $out"; exit 1; }
echo "layers: ok (the checker also fails on both planted violations)"
