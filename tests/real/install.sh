#!/usr/bin/env bash
# install.sh - uslab as a user gets it from `cmake --install` into a prefix:
# the installed commands (bin/uslab runs python3 under the installed library,
# not the build tree's; bin/uslabinfo --help), the man pages (man -l renders
# each without a warning), the licence, and the linked API: a program built
# against it with pkg-config and one with CMake's find_package(uslab) ->
# uslab::uslab; both run and use a cache and malloc, and keep the C library's
# malloc, while uslab-malloc (pkg-config) and uslab::malloc replace it.
# All of that twice: for the plain install (libraries in lib/) and for the
# Debian package's layout (`--component deb`: libraries in lib/<multiarch>,
# as Debian's packages have them, the multiarch name from `cc
# -print-multiarch`). The build tree is the one that produced $USLAB_LIB.
set -euo pipefail
: "${USLAB_LIB:?USLAB_LIB must name the built libuslab-malloc.so}"
build=$(cd "$(dirname "$USLAB_LIB")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: install: $*"; exit 1; }

multiarch=$(cc -print-multiarch 2>/dev/null || true)
deblib=lib${multiarch:+/$multiarch}

# check_files PREFIX LIBDIR - every file in place, the commands executable
check_files() {
	local prefix=$1 libdir=$2 f
	for f in include/uslab.h "$libdir"/libuslab.so "$libdir"/libuslab.a "$libdir"/libuslab-malloc.so \
		"$libdir"/pkgconfig/uslab.pc "$libdir"/pkgconfig/uslab-malloc.pc \
		"$libdir"/cmake/uslab/uslabConfig.cmake bin/uslab bin/uslabinfo share/man/man1/uslab.1 \
		share/man/man1/uslabinfo.1 share/man/man3/uslab.3 share/doc/uslab/LICENSE; do
		[ -e "$prefix/$f" ] || fail "missing $f after install to $prefix"
	done
	[ -x "$prefix/bin/uslab" ] && [ -x "$prefix/bin/uslabinfo" ] ||
		fail "bin/uslab, bin/uslabinfo not executable"
	local libs
	libs=$(cd "$prefix" && find . -name 'libuslab*' | sort | tr '\n' ' ')
	[ "$(cd "$prefix" && find . -name 'libuslab*' -not -path "./$libdir/*" | wc -l)" = 0 ] ||
		fail "libraries outside $libdir: $libs"
	echo "$prefix: libraries in $libdir only"
}

# check_commands PREFIX LIBDIR - the installed uslab runs python3 under the
# library installed beside it (no USLAB_LIB), uslabinfo answers --help
check_commands() {
	local prefix=$1 libdir=$2 out rc=0
	local maps='print(sorted({l.split()[-1] for l in open("/proc/self/maps") if "libuslab" in l}))'
	if command -v python3 >/dev/null; then
		out=$(cd "$tmp" && env -u USLAB_LIB -u LD_PRELOAD "$prefix/bin/uslab" run -- python3 -c "$maps") ||
			fail "installed uslab run -- python3 failed"
		[[ "$out" == *"'$prefix/$libdir/libuslab-malloc.so"* ]] ||
			fail "installed uslab run -- python3 did not run under the installed library: maps $out"
		echo "uslab run -- python3: $out"
		env -u USLAB_LIB "$prefix/bin/uslabinfo" --help | grep -q '^usage: uslabinfo' ||
			fail "installed uslabinfo --help"
	else
		echo "python3 not installed: uslab run -- python3 and uslabinfo --help not checked"
	fi
	env -u USLAB_LIB "$prefix/bin/uslab" run -- uslab-no-such-command 2>/dev/null || rc=$?
	[ "$rc" = 127 ] || fail "installed uslab run -- (missing command): exit $rc, want 127"
}

echo "== cmake --install $build --prefix $tmp/prefix"
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; fail "cmake --install"; }
check_files "$tmp/prefix" lib
echo "== cmake --install $build --component deb --prefix $tmp/deb/usr (the package's layout)"
cmake --install "$build" --component deb --prefix "$tmp/deb/usr" >"$tmp/install-deb.log" 2>&1 ||
	{ cat "$tmp/install-deb.log"; fail "cmake --install --component deb"; }
check_files "$tmp/deb/usr" "$deblib"

echo "== the installed commands"
check_commands "$tmp/prefix" lib
check_commands "$tmp/deb/usr" "$deblib"

echo "== the man pages"
if command -v man >/dev/null; then
	for page in man1/uslab.1 man1/uslabinfo.1 man3/uslab.3; do
		warn=$(MANWIDTH=80 man -l --warnings=w "$tmp/prefix/share/man/$page" 2>&1 >"$tmp/page.txt") ||
			fail "man -l $page failed: $warn"
		[ -z "$warn" ] || fail "man -l $page warns: $warn"
		grep -q '^NAME' "$tmp/page.txt" || fail "man -l $page: no NAME section"
		echo "man -l $page: $(grep -c . "$tmp/page.txt") lines, no warnings"
	done
else
	echo "man is not installed: the man pages not rendered"
fi

# The consumer says whose malloc the process has: the API library must
# leave the C library's in place, the drop-in must replace it.
cat >"$tmp/consumer.c" <<'EOC'
#define _GNU_SOURCE
#include <uslab.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
struct point { double x, y; };
int main(void)
{
	Dl_info where;
	if (!dladdr(dlsym(RTLD_DEFAULT, "malloc"), &where) || !where.dli_fname)
		return 3;
	const char *base = strrchr(where.dli_fname, '/');
	printf("malloc from %s\n", base ? base + 1 : where.dli_fname);
	free(malloc(1));
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

# check_consumers PREFIX LIBDIR WHAT - the consumer built against the
# install with pkg-config and with find_package, each run
check_consumers() {
	local prefix=$1 libdir=$2 what=$3 out syms
	echo "== pkg-config build ($what)"
	if command -v pkg-config >/dev/null; then
		# shellcheck disable=SC2046
		cc -O2 -o "$tmp/pc" "$tmp/consumer.c" $(PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig" \
			pkg-config --cflags --libs uslab) -Wl,-rpath,"$prefix/$libdir" -ldl ||
			fail "build with pkg-config ($what)"
		out=$("$tmp/pc") || fail "the pkg-config build does not run ($what)"
		[[ "$out" == *"malloc from libc.so"* ]] || fail "pkg-config uslab replaced the process's malloc: $out"
		# shellcheck disable=SC2046
		cc -O2 -o "$tmp/pcm" "$tmp/consumer.c" $(PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig" \
			pkg-config --cflags --libs uslab-malloc) -Wl,-rpath,"$prefix/$libdir" -ldl ||
			fail "build with pkg-config uslab-malloc ($what)"
		out=$("$tmp/pcm") || fail "the pkg-config uslab-malloc build does not run ($what)"
		[[ "$out" == *"malloc from libuslab-malloc.so"* ]] ||
			fail "pkg-config uslab-malloc did not replace the process's malloc: $out"
		pc=pkg-config
	else
		echo "pkg-config is not installed: the pkg-config consumer not built"
		pc="no pkg-config"
	fi

	echo "== CMake find_package build ($what)"
	rm -rf "$tmp/proj/build"
	cmake -S "$tmp/proj" -B "$tmp/proj/build" -DCMAKE_PREFIX_PATH="$prefix" \
		-DCMAKE_BUILD_RPATH="$prefix/$libdir" >"$tmp/cmake.log" 2>&1 ||
		{ cat "$tmp/cmake.log"; fail "configure with find_package ($what)"; }
	cmake --build "$tmp/proj/build" >"$tmp/build.log" 2>&1 ||
		{ cat "$tmp/build.log"; fail "build with find_package ($what)"; }
	grep -q "$prefix/$libdir/cmake/uslab" "$tmp/proj/build/CMakeCache.txt" ||
		fail "find_package(uslab) did not find $prefix/$libdir/cmake/uslab"
	out=$("$tmp/proj/build/consumer") || fail "the find_package build does not run ($what)"
	[[ "$out" == *"malloc from libc.so"* ]] || fail "uslab::uslab replaced the process's malloc: $out"
	out=$("$tmp/proj/build/dropin") || fail "the find_package uslab::malloc build does not run ($what)"
	[[ "$out" == *"malloc from libuslab-malloc.so"* ]] || fail "uslab::malloc did not replace malloc: $out"
	out=$("$tmp/proj/build/static") || fail "the find_package uslab::uslab_static build does not run ($what)"
	[[ "$out" == *"malloc from libc.so"* ]] ||
		fail "uslab::uslab_static replaced the process's malloc: $out"
	# nothing of the consumer references api/process.c; the link option the
	# target carries must bring it (its constructor: the fork handlers)
	if command -v nm >/dev/null; then
		syms=$(nm "$tmp/proj/build/static")   # not nm | grep -q: SIGPIPE under pipefail
		grep -q ' uslab_process_linked_$' <<<"$syms" ||
			fail "a program linking uslab::uslab_static has no fork handlers (api/process.c not linked)"
	fi
}

mkdir -p "$tmp/proj"
cp "$tmp/consumer.c" "$tmp/proj/"
cat >"$tmp/proj/CMakeLists.txt" <<'EOC'
cmake_minimum_required(VERSION 3.25)
project(consumer C)
find_package(uslab REQUIRED)
add_executable(consumer consumer.c)
target_link_libraries(consumer PRIVATE uslab::uslab ${CMAKE_DL_LIBS})
add_executable(dropin consumer.c)
target_link_libraries(dropin PRIVATE uslab::malloc ${CMAKE_DL_LIBS})
add_executable(static consumer.c)
target_link_libraries(static PRIVATE uslab::uslab_static ${CMAKE_DL_LIBS})
EOC
check_consumers "$tmp/prefix" lib "lib"
check_consumers "$tmp/deb/usr" "$deblib" "$deblib"
echo "PASS: install (lib and $deblib layouts: commands, man pages, licence; $pc and find_package consumers run)"
