#!/usr/bin/env bash
# dlopen.sh - a plugin linked with -luslab, dlopen()ed into a running program
# that did not start with uslab: glibc's static TLS surplus must hold uslab's
# initial-exec TLS (one pointer), the plugin's caches and uslab_malloc work,
# and the host's own malloc keeps working (RTLD_LOCAL: it stays glibc's).
set -euo pipefail
: "${USLAB_LIB:?USLAB_LIB must name the built libuslab-malloc.so}"
libdir=$(dirname "$USLAB_LIB")
inc=$(cd "$libdir/../.." && pwd)/allocator/include
[ -f "$inc/uslab.h" ] || inc=$(cd "$(dirname "$0")/../../allocator/include" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: dlopen: $*"; exit 1; }

cat >"$tmp/plugin.c" <<'EOC'
#include <uslab.h>
#include <pthread.h>
#include <string.h>
static void *work(void *arg)
{
	struct uslab_cache *c = arg;
	void *v[1000];
	for (int r = 0; r < 20; r++) {
		for (int i = 0; i < 1000; i++) {
			v[i] = uslab_cache_alloc(c);
			memset(v[i], r, 48);
		}
		for (int i = 0; i < 1000; i++)
			uslab_cache_free(c, v[i]);
	}
	return NULL;
}
int plugin_run(void)
{
	struct uslab_cache *c = uslab_cache_create("plugin", 48, 0, 0, NULL);
	pthread_t t[4];
	char *s = uslab_malloc(100);
	if (!c || !s)
		return 1;
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, work, c);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	uslab_free(s);
	return uslab_cache_validate(c) == 0 && uslab_cache_destroy(c) == 0 ? 0 : 2;
}
EOC
cat >"$tmp/host.c" <<'EOC'
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv)
{
	void *before = malloc(64);
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	int (*run)(void) = (int (*)(void))dlsym(h, "plugin_run");
	if (!run)
		return 1;
	int rc = run();
	free(before);                 /* the host's malloc is still glibc's */
	free(malloc(4096));
	printf("plugin_run = %d\n", rc);
	return rc;
}
EOC
cc -O2 -fPIC -shared -o "$tmp/plugin.so" "$tmp/plugin.c" -I"$inc" -L"$libdir" -luslab \
	-Wl,-rpath,"$libdir" -lpthread || fail "build the plugin"
cc -O2 -o "$tmp/host" "$tmp/host.c" -ldl || fail "build the host"
out=$("$tmp/host" "$tmp/plugin.so" 2>&1) || { echo "$out"; fail "the host failed"; }
echo "$out"
echo "PASS: dlopen (plugin linked with -luslab loaded into a running program)"
