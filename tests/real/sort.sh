#!/usr/bin/env bash
# GNU sort under uslab: 500,000 random lines sorted by whole line, by numeric
# key and uniquely, then with --parallel=2 -S 50M (worker threads allocate and
# free each other's line buffers) and with a small buffer that forces temporary
# files and merges.
set -euo pipefail
source "$(dirname "$0")/common.bash"
real_init sort
real_need sort awk

in=$REAL_TMP/lines
awk 'BEGIN {
	srand(7)
	for (i = 0; i < 500000; i++)
		printf "%08x %d %s\n", int(rand() * 4294967296), int(rand() * 1000000),
		       substr("the quick brown fox jumps over the lazy dog", 1 + int(rand() * 40))
}' >"$in"
echo "generated $(wc -l <"$in") lines, $(du -h "$in" | cut -f1)"
export LC_ALL=C

run_both plain sort "$in"
run_both numeric-key sort -k2,2n -k1,1 "$in"
run_both unique sort -u -k3 "$in"
run_both parallel sort --parallel=2 -S 50M -k2,2n -k1,1r "$in"
run_both merge sort --parallel=2 -S 2M -T . "$in"
