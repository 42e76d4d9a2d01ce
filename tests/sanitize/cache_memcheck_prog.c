/* SPDX-License-Identifier: MIT */
/*
 * cache_memcheck_prog CASE - one use of uslab_cache objects, run under
 * valgrind's memcheck by cache_memcheck.sh: "read-after-free",
 * "write-after-free", "overflow" (a read past a 40-byte object into its
 * 64-byte slot), "uninit" (a decision on an object's never-written bytes),
 * "leak" (an object live at exit) or "clean" (everything as it should be,
 * freed singly and in bulk, the cache destroyed). Built optimising, so
 * uslab.h's inline fast paths would serve these caches if the library did
 * not route them through itself under valgrind.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uslab.h>

int main(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "clean";
	struct uslab_cache *c = uslab_cache_create("memcheck", 40, 64, 0, NULL);
	char *p = uslab_cache_alloc(c);

	if (!c || !p)
		return 2;
	memset(p, 1, 40);
	if (!strcmp(what, "read-after-free")) {
		uslab_cache_free(c, p);
		return ((volatile char *)p)[16];
	}
	if (!strcmp(what, "write-after-free")) {
		uslab_cache_free(c, p);
		((volatile char *)p)[24] = 2;
		return 0;
	}
	if (!strcmp(what, "overflow"))
		return ((volatile char *)p)[48];
	if (!strcmp(what, "uninit")) {
		char *q = uslab_cache_alloc(c);

		if (q[20] == 7)   /* never written */
			puts("seven");
		return 0;
	}
	if (!strcmp(what, "leak"))   /* p still allocated at exit */
		return 0;
	/* clean */
	static void *objs[3000];
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 3000; i++) {
			objs[i] = uslab_cache_alloc(c);
			if (!objs[i])
				return 2;
			memset(objs[i], i, 40);
		}
		for (int i = 0; i < 3000; i += 2)
			uslab_cache_free(c, objs[i]);
		for (int i = 0; i < 1500; i++)
			objs[i] = objs[2 * i + 1];
		uslab_cache_free_bulk(c, 1500, objs);
	}
	uslab_cache_free(c, p);
	uslab_cache_shrink(c);
	return uslab_cache_destroy(c) == 0 ? 0 : 3;
}
