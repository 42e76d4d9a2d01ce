#!/usr/bin/env bash
# awk under uslab: associative arrays of 300,000 keys built, split, deleted and
# rebuilt, string concatenation, sprintf, split() and gsub() over generated
# records, then a word-frequency report. Runs whichever awk is installed (mawk
# or gawk), and gawk as well when present.
set -euo pipefail
source "$(dirname "$0")/common.bash"
real_init awk
real_need awk
export LC_ALL=C

cat >"$REAL_TMP/work.awk" <<'AWK'
BEGIN {
	seed = 1
	for (i = 0; i < 300000; i++) {
		seed = (seed * 16807) % 2147483647
		k = sprintf("key%x", seed % 1000003)
		h[k] = h[k] sprintf("%d,", i % 1000)
	}
	n = 0; len = 0
	for (k in h) { n++; len += length(h[k]) }
	printf "keys %d, total %d\n", n, len
	d = 0
	for (k in h) if (length(h[k]) > 4) { delete h[k]; d++ }
	printf "deleted %d\n", d
	for (k in h) { m = split(h[k], parts, ","); cnt[m]++ }
	for (m in cnt) printf "split %d: %d\n", m, cnt[m] | "sort -n -k2"
	close("sort -n -k2")
}
{
	line = $0
	nsub += gsub(/[aeiou]+/, "<&>", line)
	for (f = 1; f <= NF; f++) words[$f]++
	rec[NR % 5000] = line
}
END {
	printf "records %d, substitutions %d\n", NR, nsub
	nw = 0
	for (w in words) { nw++; if (words[w] > max) { max = words[w]; top = w } }
	printf "words %d, most frequent %s (%d)\n", nw, top, max
	s = ""
	for (i = 0; i < 5000; i++) s = s substr(rec[i], 1, 20)
	printf "joined %d\n", length(s)
}
AWK

awk 'BEGIN {
	srand(3)
	split("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu", w, " ")
	for (i = 0; i < 200000; i++) {
		line = ""
		for (j = 0; j < 3 + i % 9; j++) line = line w[1 + int(rand() * 12)] int(rand() * 50) " "
		print line
	}
}' >"$REAL_TMP/records"
echo "generated $(wc -l <"$REAL_TMP/records") records"

run_both awk awk -f "$REAL_TMP/work.awk" "$REAL_TMP/records"
if command -v gawk >/dev/null 2>&1; then
	run_both gawk gawk -f "$REAL_TMP/work.awk" "$REAL_TMP/records"
fi
