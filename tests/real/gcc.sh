#!/usr/bin/env bash
# gcc under uslab: compile a generated C file of 2,000 functions with -O2 (cc1
# allocates heavily: GC arenas, obstacks, hash tables), link it and run it.
# The object must be byte-identical to glibc's, and the program must print the
# same checksum.
set -euo pipefail
source "$(dirname "$0")/common.bash"
real_init gcc
real_need gcc size nm

src=$REAL_TMP/gen.c
{
	echo '#include <stdio.h>'
	echo '#include <string.h>'
	echo 'struct pt { long x, y; char tag[24]; };'
	for i in $(seq 0 1999); do
		case $((i % 4)) in
		0) cat <<C
static long f$i(long a) {
	long s = $i;
	for (int k = 0; k < (int)(a & 15) + 3; k++)
		s = s * 31 + (k ^ a) + $((i * 7 % 101));
	return s;
}
C
			;;
		1) cat <<C
static long f$i(long a) {
	switch ((a + $i) % 6) {
	case 0: return a * $i;
	case 1: return a - $((i % 13));
	case 2: return (a << 3) ^ $i;
	case 3: return a / ($((i % 7)) + 1);
	case 4: return a % 1000 + $i;
	default: return -a;
	}
}
C
			;;
		2) cat <<C
static long f$i(long a) {
	struct pt p = { a, a + $i, "" };
	snprintf(p.tag, sizeof p.tag, "f$i-%ld", a % 97);
	return p.x * 3 + p.y + (long)strlen(p.tag);
}
C
			;;
		3) cat <<C
static long f$i(long a) {
	long v[8];
	for (int k = 0; k < 8; k++)
		v[k] = a * k + $i;
	long m = v[0];
	for (int k = 1; k < 8; k++)
		if (v[k] % 5 > m % 5)
			m = v[k];
	return m + f$((i - 1))(a & 255);
}
C
			;;
		esac
	done
	echo 'static long (*const tab[])(long) = {'
	for i in $(seq 0 1999); do
		echo "	f$i,"
	done
	echo '};'
	echo 'int main(void) {'
	echo '	unsigned long sum = 0;'
	echo '	for (unsigned i = 0; i < sizeof tab / sizeof tab[0]; i++)'
	echo '		sum = sum * 1099511628211UL + (unsigned long)tab[i]((long)sum & 0xffff);'
	echo '	printf("checksum %lx\n", sum);'
	echo '	return 0;'
	echo '}'
} >"$src"
echo "generated $(wc -l <"$src") lines, 2000 functions"

run_both_sh compile-O2 "gcc -O2 -Wall -c '$src' -o gen.o && md5sum <gen.o && size gen.o &&
	nm gen.o | md5sum && gcc gen.o -o prog && ./prog"
