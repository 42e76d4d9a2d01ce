#!/usr/bin/env bash
# uslabinfo.sh - tools/uslabinfo on real dumps: one written by `ls -R /usr/share`
# under LD_PRELOAD=$USLAB_LIB (ctest sets it), and one it makes itself with
# `uslabinfo -- CMD` (python3). Checks the summary line, the account of the
# committed memory, the table's header, kmalloc rows, the start-up arena's
# row and the totals line, each --sort order, --plot (a well-formed, non-empty
# SVG naming the caches), several dumps (a table each, in the order they were
# written; --plot draws the committed memory over time), and the errors for a
# missing, non-JSON and non-uslab file. (--pid and --watch: stats_signal.sh.)
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

HEADER_RE='^name +objsize +live +slots +slabs +memory +in use +free +allocs +frees +remote$'
SIZE='[0-9]+(\.[0-9])? (B|KiB|MiB|GiB|TiB)'
ROW_RE="^kmalloc-[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +$SIZE +$SIZE +([0-9.]+%|-) +[0-9]+ +[0-9]+ +([0-9.]+%|-)\$"

# rows FILE - the table's rows (not the total) as tab-separated fields: name, live,
# slots, slabs, free, allocs ("-" for what a row has not: the block rows' counts)
rows() {
	awk -v OFS='\t' '
		/^name / { on = 1; next }
		on && /^total / { exit }
		on { off = ($1 == "large" || $1 == "huge" || $1 == "start-up")
		     name = off ? $1 " " $2 : $1
		     print name, $(3 + off), $(4 + off), $(5 + off), $(10 + off), $(11 + off) }' "$1"
}

# check_table FILE WHAT - header, account, kmalloc rows, a totals line that adds up
check_table() {
	local f=$1 what=$2
	if ! grep -qE '^uslab [0-9.]+, dwcas [^,]+, pid [0-9]+, ' "$f"; then
		real_bad "$what: no summary line"; real_show "$f" output; return
	fi
	if ! grep -qE "^  memory committed +$SIZE +100% " "$f" ||
		[ "$(grep -cE "^  (objects in use|cached by threads|free in slabs|large blocks|large, kept|huge blocks|huge, kept|start-up arena|free, not returned|segment headers|metadata) +$SIZE " "$f")" != 11 ]; then
		real_bad "$what: no account of the committed memory"; real_show "$f" output; return
	fi
	if ! grep -qE "$HEADER_RE" "$f"; then
		real_bad "$what: no table header"; real_show "$f" output; return
	fi
	local n
	n=$(grep -cE "$ROW_RE" "$f" || true)
	if [ "$n" -lt 1 ]; then
		real_bad "$what: no kmalloc row"; real_show "$f" output; return
	fi
	# the totals line sums the live objects, slabs and allocations of the rows
	if rows "$f" | awk -F'\t' -v total="$(grep -E '^total ' "$f")" '
		{ if ($2 != "-") l += $2; if ($4 != "-") s += $4; if ($6 != "-") a += $6 }
		END { split(total, t, / +/); exit !(l == t[2] && s == t[4] && a == t[10]) }'; then
		real_ok "$what: summary, account, header, $n kmalloc rows, totals add up"
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

# default order: memory, largest first (compare the dump's numbers, not the human units);
# the blocks outside caches are rows too
want=$("$PY" -c '
import json, sys
d = json.load(open(sys.argv[1]))
rows = [(x["memory_bytes"], x["name"]) for x in d["caches"]]
for name, key in (("large blocks", "large_bytes"), ("huge blocks", "huge_bytes"),
                  ("start-up arena", "startup_arena_cut_bytes")):
    if d.get(key):
        rows.append((d[key], name))
print("|".join(n for m, n in sorted(rows, key=lambda r: (-r[0], r[1]))))' "$dump")
got=$(rows "$tmp/t.out" | cut -f1 | paste -sd'|')
[ "$got" = "$want" ] && real_ok "default sort is by memory" || real_bad "default order is not by memory: $got, want $want"
grep -q '^start-up arena ' "$tmp/t.out" && real_ok "the start-up arena has a row" ||
	real_bad "no start-up arena row (ls cut $("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["startup_arena_cut_bytes"])' "$dump") bytes from it)"

TOOL --sort name "$dump" >"$tmp/n.out"
rows "$tmp/n.out" | cut -f1 >"$tmp/names"
LC_ALL=C sort -c "$tmp/names" 2>/dev/null && real_ok "--sort name: alphabetical" || real_bad "--sort name is not alphabetical"

for key in live allocs free; do
	col=$(case $key in live) echo 2;; allocs) echo 6;; free) echo 5;; esac)
	TOOL --sort $key "$dump" >"$tmp/k.out"
	rows "$tmp/k.out" | cut -f$col | sed 's/%//; s/^-$/0/' >"$tmp/vals"
	sort -g -r -c "$tmp/vals" 2>/dev/null && real_ok "--sort $key: largest first" ||
		real_bad "--sort $key is not descending"
done

TOOL -n 3 "$dump" >"$tmp/top.out"
[ "$(rows "$tmp/top.out" | wc -l)" = 3 ] &&
	real_ok "--top 3 shows three rows" || real_bad "--top 3 does not show three rows"

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

# ---- several dumps: in the order written, and --plot over time --------------------------------------
for d in doc man; do   # written after ls.json, in this order
	env LD_PRELOAD="$USLAB_LIB" USLAB_STATS_FILE="$tmp/$d.json" ls -R /usr/share/$d >/dev/null 2>&1 || true
	[ -s "$tmp/$d.json" ] || real_die "ls -R /usr/share/$d under the preload wrote no dump"
done
pids=$("$PY" -c 'import json, sys; print(" ".join(str(json.load(open(f))["pid"]) for f in sys.argv[1:]))' \
	"$dump" "$tmp/doc.json" "$tmp/man.json")
svg=$tmp/time.svg
if TOOL --plot "$svg" "$tmp/man.json" "$dump" "$tmp/doc.json" >"$tmp/m.out" 2>"$tmp/m.err" &&
	[ "$(sed -nE 's/^uslab .*, pid ([0-9]+), .*/\1/p' "$tmp/m.out" | paste -sd' ')" = "$pids" ] &&
	"$PY" -c '
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
polygons = [e for e in root.iter() if e.tag.endswith("polygon")]
titles = [e.text for p in polygons for e in p if e.tag.endswith("title")]
texts = " ".join(e.text or "" for e in root.iter() if e.tag.endswith("text"))
assert len(polygons) == 11 and "metadata" in titles and "objects in use" in titles, titles
assert "seconds, 3 reports" in texts and "over time" in texts, texts[:200]
for p in polygons:   # a band is 3 points on top, 3 below
    assert len(p.get("points").split()) == 6, p.get("points")' "$svg"; then
	real_ok "three dumps: three tables in the order written, --plot draws the account over time"
else
	real_bad "three dumps: not three tables in time order ($pids) with a plot over time"
	real_show "$tmp/m.err" stderr
	real_show "$tmp/m.out" stdout
fi
rc=0
TOOL --plot "$tmp/time.png" "$dump" "$tmp/doc.json" >/dev/null 2>"$tmp/e.err" || rc=$?
[ "$rc" = 2 ] && grep -q "as SVG only" "$tmp/e.err" &&
	real_ok "several dumps to a PNG: $(cat "$tmp/e.err")" ||
	real_bad "several dumps to a PNG: status $rc, $(cat "$tmp/e.err")"

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
expect_error "no arguments" "give a FILE, -- CMD or --pid PID"
expect_error "FILE and --pid" "give one of FILE, -- CMD or --pid PID" --pid 1 "$dump"
expect_error "--watch without --pid" "^uslabinfo: --watch needs --pid" --watch 1 "$dump"
expect_error "a bad --watch" "is not a number of seconds > 0" --pid 1 --watch 0
"$SCRIPT" --help >"$tmp/h.out" && grep -q -- '--sort' "$tmp/h.out" && grep -q -- '--plot' "$tmp/h.out" &&
	real_ok "--help" || real_bad "--help does not describe --sort and --plot"
