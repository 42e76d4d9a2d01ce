#!/usr/bin/env bash
# uslabinfo.sh - tools/uslabinfo on real dumps: one written by `ls -R /usr/share`
# under LD_PRELOAD=$USLAB_LIB (ctest sets it), and one it makes itself with
# `uslabinfo -- CMD` (python3). Checks the table's header, kmalloc rows and
# totals line, each --sort order, --plot (a well-formed, non-empty SVG naming
# the caches), and the errors for a missing, non-JSON and non-uslab file.
set -euo pipefail
source "$(dirname "$0")/common.bash"
unset USLAB_STATS USLAB_STATS_FILE USLAB_STATS_SIGNAL
real_init uslabinfo "tools/uslabinfo on real dumps"
real_need python3
SCRIPT=$(cd "$(dirname "$0")/../.." && pwd)/tools/uslabinfo
[ -x "$SCRIPT" ] || real_die "$SCRIPT is missing or not executable"
PY=$(python3 -c 'import sys; print(sys.executable)')   # the interpreter, not a shim
# run by the interpreter directly (a pyenv-style shim costs ~0.5 s a start);
# --help below goes through the #! line
TOOL() { "$PY" "$SCRIPT" "$@"; }
tmp=$REAL_TMP
echo "$SCRIPT, LD_PRELOAD=$USLAB_LIB"

HEADER_RE='^cache +objsize +objects live/total +slabs/part +memory +waste +allocs +frees +remote$'
ROW_RE='^kmalloc-[0-9]+ +[0-9]+ +[0-9]+/[0-9]+ +[0-9]+/[0-9]+ +[0-9.]+[BKMGT] +[0-9.]+% +[0-9]+ +[0-9]+ +[0-9.]+%$'

# check_table FILE WHAT - header, kmalloc rows, a totals line that adds up
check_table() {
	local f=$1 what=$2
	if ! grep -qE '^uslab [0-9.]+, dwcas ' "$f"; then
		real_bad "$what: no summary line"; real_show "$f" output; return
	fi
	if ! grep -qE "$HEADER_RE" "$f"; then
		real_bad "$what: no table header"; real_show "$f" output; return
	fi
	local rows
	rows=$(grep -cE "$ROW_RE" "$f" || true)
	if [ "$rows" -lt 1 ]; then
		real_bad "$what: no kmalloc row"; real_show "$f" output; return
	fi
	# the totals line sums the live objects, slabs and allocations of the rows
	if awk '
		/^cache / { on = 1; next }
		on && /^total \(/ { split($(NF-6), o, "/"); split($(NF-5), s, "/");
			tl = o[1]; ts = s[1]; ta = $(NF-2); ncache = $2; sub(/\(/, "", ncache); done = 1; next }
		on { split($3, o, "/"); split($4, s, "/"); l += o[1]; sl += s[1]; a += $7; n++ }
		END { exit !(done && l == tl && sl == ts && a == ta && n == ncache) }' "$f"; then
		real_ok "$what: header, $rows kmalloc rows, totals add up"
	else
		real_bad "$what: the totals line does not add up"
		real_show "$f" output
	fi
}

# ---- a dump written by a real program --------------------------------------------------------
dump=$tmp/ls.json
env LD_PRELOAD="$USLAB_LIB" USLAB_STATS_FILE="$dump" ls -R /usr/share >/dev/null 2>&1 || true
[ -s "$dump" ] || real_die "ls -R /usr/share under the preload wrote no dump"
TOOL "$dump" >"$tmp/t.out" 2>"$tmp/t.err" || real_bad "uslabinfo FILE failed: $(cat "$tmp/t.err")"
check_table "$tmp/t.out" "uslabinfo ls.json"

# default order: memory, largest first (compare the dump's numbers, not the human units)
want=$("$PY" -c '
import json, sys
c = json.load(open(sys.argv[1]))["caches"]
print(" ".join(x["name"] for x in sorted(c, key=lambda x: (-x["memory_bytes"], x["name"]))))' "$dump")
got=$(awk '/^cache /{on=1;next} on && !/^total \(/{printf "%s%s", sep, $1; sep=" "}' "$tmp/t.out")
[ "$got" = "$want" ] && real_ok "default sort is by memory" || real_bad "default order is not by memory: $got"

TOOL --sort name "$dump" >"$tmp/n.out"
awk '/^cache /{on=1;next} on && !/^total \(/{print $1}' "$tmp/n.out" >"$tmp/names"
LC_ALL=C sort -c "$tmp/names" 2>/dev/null && real_ok "--sort name: alphabetical" || real_bad "--sort name is not alphabetical"

for key in live allocs; do
	col=$([ $key = live ] && echo 3 || echo 7)
	TOOL --sort $key "$dump" >"$tmp/k.out"
	awk -v c=$col '/^cache /{on=1;next} on && !/^total \(/{split($c, v, "/"); print v[1]}' \
		"$tmp/k.out" >"$tmp/vals"
	sort -n -r -c "$tmp/vals" 2>/dev/null && real_ok "--sort $key: largest first" ||
		real_bad "--sort $key is not descending"
done
TOOL --sort waste "$dump" >"$tmp/w.out"
awk '/^cache /{on=1;next} on && !/^total \(/{sub(/%/, "", $6); print $6}' "$tmp/w.out" >"$tmp/vals"
sort -g -r -c "$tmp/vals" 2>/dev/null && real_ok "--sort waste: largest first" || real_bad "--sort waste is not descending"

TOOL -n 3 "$dump" >"$tmp/top.out"
[ "$(awk '/^cache /{on=1;next} on && !/^total \(/' "$tmp/top.out" | wc -l)" = 3 ] &&
	real_ok "--top 3 shows three caches" || real_bad "--top 3 does not show three caches"

# ---- --plot ------------------------------------------------------------------------------------
svg=$tmp/memory.svg
if TOOL --plot "$svg" "$dump" >/dev/null 2>"$tmp/p.err" && [ -s "$svg" ] &&
	"$PY" -c '
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag.endswith("svg"), root.tag
rects = [e for e in root.iter() if e.tag.endswith("rect")]
texts = " ".join(e.text or "" for e in root.iter() if e.tag.endswith("text"))
assert len(rects) > 3 and "kmalloc-" in texts, (len(rects), texts[:80])' "$svg"; then
	real_ok "--plot: a well-formed SVG ($(wc -c <"$svg") bytes) with kmalloc bars"
else
	real_bad "--plot did not write a well-formed, non-empty SVG"
	real_show "$tmp/p.err" stderr
fi

# ---- -- CMD ---------------------------------------------------------------------------------------
TOOL --sort allocs -- "$PY" -c 'x = [bytes(100 + i % 4000) for i in range(30000)]' \
	>"$tmp/c.out" 2>"$tmp/c.err" || real_bad "uslabinfo -- python3 failed: $(cat "$tmp/c.err")"
check_table "$tmp/c.out" "uslabinfo -- python3"
rc=0
TOOL -- "$PY" -c 'import sys; x = bytes(5000); sys.exit(3)' >"$tmp/s.out" 2>"$tmp/s.err" || rc=$?
if [ "$rc" = 3 ] && grep -qE "$HEADER_RE" "$tmp/s.out" && grep -q 'exited with status 3' "$tmp/s.err"; then
	real_ok "uslabinfo -- CMD: the table, then CMD's exit status"
else
	real_bad "uslabinfo -- CMD exiting 3: status $rc, want 3 with the table and a note"
	real_show "$tmp/s.err" stderr
fi
rc=0
TOOL -- "$PY" -c 'import os; os._exit(4)' >"$tmp/s.out" 2>"$tmp/s.err" || rc=$?
if [ "$rc" = 4 ] && grep -q 'wrote no statistics' "$tmp/s.err"; then
	real_ok "uslabinfo -- CMD that writes no dump: a clear message and CMD's status"
else
	real_bad "uslabinfo -- CMD calling _exit(4): status $rc, stderr $(cat "$tmp/s.err")"
fi

# ---- errors ----------------------------------------------------------------------------------------
# expect_error WHAT PATTERN ARGS... - exit status 2 and one clear message
expect_error() {
	local what=$1 pat=$2 rc=0
	shift 2
	TOOL "$@" >"$tmp/e.out" 2>"$tmp/e.err" || rc=$?
	if [ "$rc" = 2 ] && grep -qE "$pat" "$tmp/e.err" && [ ! -s "$tmp/e.out" ]; then
		real_ok "$what: $(head -n1 "$tmp/e.err")"
	else
		real_bad "$what: exit $rc, stderr: $(head -n2 "$tmp/e.err")"
	fi
}
expect_error "a missing file" "^uslabinfo: cannot read .*: No such file" "$tmp/nope.json"
printf 'not json\n' >"$tmp/bad.json"
expect_error "a file that is not JSON" "^uslabinfo: .* is not valid JSON" "$tmp/bad.json"
printf '{"caches": 1}\n' >"$tmp/other.json"
expect_error "JSON that is not a dump" "not a uslab statistics dump" "$tmp/other.json"
: >"$tmp/empty.json"
expect_error "an empty file" "is empty" "$tmp/empty.json"
expect_error "a bad --sort" "invalid choice" --sort size "$dump"
expect_error "no arguments" "give a FILE or -- CMD" 
"$SCRIPT" --help >"$tmp/h.out" && grep -q -- '--sort' "$tmp/h.out" && grep -q -- '--plot' "$tmp/h.out" &&
	real_ok "--help" || real_bad "--help does not describe --sort and --plot"
