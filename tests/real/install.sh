#!/usr/bin/env bash
# install.sh - the linked API as a user gets it: `cmake --install` into a
# prefix, then a program built against it with pkg-config and one with CMake's
# find_package(uslab) -> uslab::uslab; both run and use a cache and malloc.
# The build tree is the one that produced $USLAB_LIB.
set -euo pipefail
: "${USLAB_LIB:?USLAB_LIB must name the built libuslab.so}"
build=$(cd "$(dirname "$USLAB_LIB")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: install: $*"; exit 1; }

echo "== cmake --install $build --prefix $tmp/prefix"
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; fail "cmake --install"; }
for f in include/uslab.h lib/libuslab.so lib/libuslab.a lib/pkgconfig/uslab.pc lib/cmake/uslab/uslabConfig.cmake; do
	[ -e "$tmp/prefix/$f" ] || fail "missing $f after install"
done

cat >"$tmp/consumer.c" <<'EOC'
#include <uslab.h>
#include <stdio.h>
#include <string.h>
struct point { double x, y; };
int main(void)
{
	struct uslab_cache *c = uslab_cache_create("points", sizeof(struct point), 0, 0, NULL);
	struct point *p = uslab_cache_alloc(c);
	char *s = uslab_malloc(32);
	if (!c || !p || !s)
		return 1;
	p->x = 1.5;
	strcpy(s, "hello");
	uslab_cache_free(c, p);
	uslab_free(s);
	if (uslab_cache_destroy(c) != 0)
		return 2;
	printf("consumer ok (dwcas %s)\n", uslab_dwcas_path());
	return 0;
}
EOC

echo "== pkg-config build"
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
# shellcheck disable=SC2046
cc -O2 -o "$tmp/pc" "$tmp/consumer.c" $(pkg-config --cflags --libs uslab) -Wl,-rpath,"$tmp/prefix/lib" \
	|| fail "build with pkg-config"
"$tmp/pc" || fail "the pkg-config build does not run"

echo "== CMake find_package build"
mkdir -p "$tmp/proj"
cp "$tmp/consumer.c" "$tmp/proj/"
cat >"$tmp/proj/CMakeLists.txt" <<'EOC'
cmake_minimum_required(VERSION 3.25)
project(consumer C)
find_package(uslab REQUIRED)
add_executable(consumer consumer.c)
target_link_libraries(consumer PRIVATE uslab::uslab)
EOC
cmake -S "$tmp/proj" -B "$tmp/proj/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
	-DCMAKE_BUILD_RPATH="$tmp/prefix/lib" >"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log"; fail "configure with find_package"; }
cmake --build "$tmp/proj/build" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; fail "build with find_package"; }
"$tmp/proj/build/consumer" || fail "the find_package build does not run"
echo "PASS: install (pkg-config and find_package consumers run)"
