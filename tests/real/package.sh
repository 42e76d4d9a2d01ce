#!/usr/bin/env bash
# package.sh - the Debian package: `cpack -G DEB` with the CPack settings of
# the build tree that produced $USLAB_LIB, its contents listed with
# dpkg-deb -c (commands, header, man pages, licence; the libraries, their
# pkg-config and CMake files in usr/lib/<multiarch> as Debian's own packages
# have them, the multiarch name from `cc -print-multiarch`, and nowhere else)
# and its control fields; then the package extracted with dpkg-deb -x and
# its own usr/bin/uslab run: `uslab run -- python3 -c 'print(1)'` prints 1,
# under the extracted library.
#
# cpack in a build tree first builds its `all` target (preinstall), which
# would relink the libraries under the tests running beside this one if a
# source changed since the build. So the tree is installed with
# `cmake --install --component deb` (which never builds) into a staging
# directory, and cpack packages that directory under /usr, as it would its
# own install of that component.
set -euo pipefail
: "${USLAB_LIB:?USLAB_LIB must name the built libuslab-malloc.so}"
build=$(cd "$(dirname "$USLAB_LIB")/.." && pwd)
for t in cpack dpkg-deb python3; do
	command -v "$t" >/dev/null || { echo "SKIP: package: '$t' is not installed"; exit 0; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: package: $*"; exit 1; }

echo "== cpack -G DEB with $build/CPackConfig.cmake"
[ -f "$build/CPackConfig.cmake" ] || fail "no CPackConfig.cmake in $build"
cmake --install "$build" --component deb --prefix "$tmp/stage" >"$tmp/install.log" 2>&1 ||
	{ cat "$tmp/install.log"; fail "cmake --install --component deb"; }
cp "$build/CPackConfig.cmake" "$tmp/CPackConfig.cmake"
cat >>"$tmp/CPackConfig.cmake" <<EOC
set(CPACK_INSTALL_CMAKE_PROJECTS "")
set(CPACK_INSTALLED_DIRECTORIES "$tmp/stage;usr")
EOC
if ! cpack -G DEB --config "$tmp/CPackConfig.cmake" -B "$tmp/out" >"$tmp/cpack.log" 2>&1; then
	cat "$tmp/cpack.log"
	find "$tmp/out" -name '*Output.log' -exec tail -n 30 {} + 2>/dev/null || true
	fail "cpack -G DEB"
fi
debs=("$tmp"/out/uslab_*.deb)
[ -f "${debs[0]}" ] || { cat "$tmp/cpack.log"; fail "no uslab_*.deb in $tmp/out"; }
deb=${debs[0]}
echo "built $(basename "$deb")"

echo "== dpkg-deb -c"
dpkg-deb -c "$deb" | awk '{print $6}' >"$tmp/contents"
for f in ./usr/bin/uslab ./usr/bin/uslabinfo ./usr/include/uslab.h ./usr/share/doc/uslab/LICENSE \
	./usr/share/man/man1/uslab.1 ./usr/share/man/man1/uslabinfo.1 ./usr/share/man/man3/uslab.3; do
	grep -qxF "$f" "$tmp/contents" || fail "the package lacks $f"
done
multiarch=$(cc -print-multiarch 2>/dev/null || true)
libdir=./usr/lib${multiarch:+/$multiarch}
for f in libuslab.so.0 libuslab-malloc.so.0 libuslab.so libuslab.a pkgconfig/uslab.pc \
	pkgconfig/uslab-malloc.pc cmake/uslab/uslabConfig.cmake cmake/uslab/uslabTargets.cmake; do
	grep -qxF "$libdir/$f" "$tmp/contents" || fail "the package lacks $libdir/$f"
done
grep -qE "^${libdir//./\\.}/libuslab-malloc\.so\.[0-9.]+$" "$tmp/contents" ||
	fail "the package lacks $libdir/libuslab-malloc.so.VERSION"
if grep -E '/(libuslab[^/]*|uslab[^/]*\.pc|uslabConfig\.cmake)$' "$tmp/contents" | grep -vq "^$libdir/"; then
	fail "libraries or their files outside $libdir: $(grep -E '/libuslab' "$tmp/contents" | tr '\n' ' ')"
fi
echo "libraries, pkg-config and CMake files in ${libdir#.}"
echo "$(wc -l <"$tmp/contents") entries, the expected files among them"
for field in Package Version Maintainer Depends Description; do
	v=$(dpkg-deb -f "$deb" "$field")
	[ -n "$v" ] || fail "control field $field is empty"
	echo "$field: ${v%%$'\n'*}"
done
[ "$(dpkg-deb -f "$deb" Package)" = uslab ] || fail "Package is not uslab"

echo "== dpkg-deb -x, then the package's own uslab"
dpkg-deb -x "$deb" "$tmp/root" || fail "dpkg-deb -x"
out=$(cd "$tmp" && env -u USLAB_LIB -u LD_PRELOAD "$tmp/root/usr/bin/uslab" run -- python3 -c 'print(1)') ||
	fail "the extracted uslab run -- python3 failed"
[ "$out" = 1 ] || fail "the extracted uslab run -- python3 -c 'print(1)' printed '$out'"
maps=$(cd "$tmp" && env -u USLAB_LIB "$tmp/root/usr/bin/uslab" run -- python3 -c \
	'print(sorted({l.split()[-1] for l in open("/proc/self/maps") if "libuslab" in l}))')
[[ "$maps" == *"'$tmp/root${libdir#.}/libuslab-malloc.so"* ]] || fail "not run under the extracted library: $maps"
echo "uslab run -- python3 -c 'print(1)': $out, under $maps"
echo "PASS: package ($(basename "$deb"): contents, control fields, the extracted uslab runs python3)"
