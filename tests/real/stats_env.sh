#!/usr/bin/env bash
# stats_env.sh - the statistics options end to end, in real processes under
# LD_PRELOAD=$USLAB_LIB (ctest sets it):
#   USLAB_STATS=1             the table on stderr at exit (python3, and ls:
#                             coreutils close stderr in an atexit handler)
#   USLAB_STATS_FILE=path     valid JSON at exit, with the expected keys and a
#                             non-empty cache array; nothing on stderr;
#                             an unwritable path gives one message
#   USLAB_STATS_SIGNAL=USR2   a running process writes the JSON (or, without
#                             a file, the table) on each signal
#   USLAB_FOO=1, bad values   one warning line each, the program still works;
#                             tool variables (USLAB_TEST_*) are silent; in a
#                             process tree, each warning once (USLAB_WARNED)
# The programs are the real python3 interpreter (not a pyenv-style shim, whose
# helper processes would each write statistics too) and ls.
set -euo pipefail
source "$(dirname "$0")/common.bash"
unset USLAB_STATS USLAB_STATS_FILE USLAB_STATS_SIGNAL
real_init stats_env "the statistics options"
real_need python3
PY=$(python3 -c 'import sys; print(sys.executable)')
echo "LD_PRELOAD=$USLAB_LIB, python $PY"
tmp=$REAL_TMP

# Enough malloc traffic (blocks above pymalloc's 512-byte limit) to fill caches.
WORK='x = [bytes(600 + i % 3000) for i in range(20000)]; del x[::2]; print("hello")'

# json_ok FILE - FILE is valid JSON with uslab's top-level keys and caches.
json_ok() {
	"$PY" - "$1" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    sys.exit("not valid JSON: %s" % e)
top = {"uslab_version", "dwcas", "mapped_bytes", "committed_bytes", "in_use_bytes",
       "huge_blocks", "huge_bytes", "caches"}
if top - set(d):
    sys.exit("top-level keys %s lack %s" % (sorted(d), sorted(top - set(d))))
c = d["caches"]
if not isinstance(c, list) or not c:
    sys.exit("caches is not a non-empty array")
need = {"name", "object_size", "objects_per_slab", "slabs", "live_objects", "memory_bytes",
        "waste_bytes"}
# a signal's report is a snapshot the handler writes: occupancy, no counters
snapshot = d.get("report") == "signal"
if not snapshot:
    need |= {"alloc_fast", "alloc_slow", "free_fast", "free_local", "free_remote", "new_slab",
             "slab_freed"}
for e in c:
    if need - set(e):
        sys.exit("cache %s lacks %s" % (e.get("name"), sorted(need - set(e))))
    if not snapshot and e["slabs"] != e["new_slab"] - e["slab_freed"]:
        sys.exit("cache %s: slabs %d != new_slab - slab_freed" % (e["name"], e["slabs"]))
if not any(e["name"].startswith("kmalloc-") for e in c):
    sys.exit("no kmalloc cache")
print("%s report, %d caches, %d bytes mapped" % (d.get("report"), len(c), d["mapped_bytes"]))
PY
}

# is_table FILE - FILE holds exactly one statistics table with kmalloc rows.
is_table() {
	[ "$(grep -cE '^uslab statistics \(dwcas: [^)]+\), pid [0-9]+, .+$' "$1")" = 1 ] &&
		grep -qE '^name +objsize +live +slots +slabs +memory +in use +free +allocs +frees +remote$' "$1" &&
		grep -qE '^kmalloc-[0-9]+ +[0-9]+ ' "$1"
}

# ---- USLAB_STATS=1 ---------------------------------------------------------------
out=$tmp/stats.out err=$tmp/stats.err
env LD_PRELOAD="$USLAB_LIB" USLAB_STATS=1 "$PY" -c "$WORK" >"$out" 2>"$err" || real_bad "python3 failed with USLAB_STATS=1"
if [ "$(cat "$out")" = hello ] && is_table "$err"; then
	real_ok "USLAB_STATS=1: python3 printed the table on stderr ($(grep -c '^kmalloc-' "$err") kmalloc rows)"
else
	real_bad "USLAB_STATS=1: no table (or not exactly one) on python3's stderr"
	real_show "$err" stderr
fi

# the arena's account line and its row agree: cut (memory) and live (in use)
arena_line=$(grep -E '^  start-up arena ' "$err" || true)
arena_row=$(grep -E '^start-up arena ' "$err" || true)
line_live=$(sed -nE 's/.*  ([0-9.]+ [KMG]?i?B) in live blocks.*/\1/p' <<<"$arena_line")
row_live=$(awk '{ print $9, $10 }' <<<"$arena_row")
row_cut=$(awk '{ print $7, $8 }' <<<"$arena_row")
if [ -n "$arena_row" ] && [ "$line_live" = "$row_live" ] && grep -qF "  $row_cut " <<<"$arena_line" &&
	[ "$row_cut" != "$row_live" ]; then
	real_ok "USLAB_STATS=1: the start-up arena's line and row agree ($row_cut cut, $row_live live)"
else
	real_bad "USLAB_STATS=1: the arena's account line ($arena_line) and row ($arena_row) disagree"
fi

env LD_PRELOAD="$USLAB_LIB" "$PY" -c "$WORK" >"$out" 2>"$err"
if [ -s "$err" ]; then
	real_bad "without options, python3 wrote to stderr"
	real_show "$err" stderr
else
	real_ok "no options: nothing on stderr"
fi

# coreutils close stdout and stderr in an atexit handler, which runs before the
# library's destructor: the table must still appear.
if env LD_PRELOAD="$USLAB_LIB" USLAB_STATS=1 ls -R /usr/share >/dev/null 2>"$err" && is_table "$err"; then
	real_ok "USLAB_STATS=1: ls printed the table"
else
	real_bad "USLAB_STATS=1: ls printed no table (its atexit close_stdout closes fd 2 before uslab's destructor writes)"
	real_show "$err" stderr
fi

# ---- USLAB_STATS_FILE ---------------------------------------------------------------
f=$tmp/stats.json
env LD_PRELOAD="$USLAB_LIB" USLAB_STATS_FILE="$f" "$PY" -c "$WORK" >"$out" 2>"$err" || real_bad "python3 failed with USLAB_STATS_FILE"
if [ ! -s "$f" ]; then
	real_bad "USLAB_STATS_FILE: $f was not written"
elif ! "$PY" -m json.tool "$f" >/dev/null 2>"$tmp/jt.err"; then
	real_bad "USLAB_STATS_FILE: python3 -m json.tool rejects it: $(head -n1 "$tmp/jt.err")"
elif msg=$(json_ok "$f" 2>&1); then
	real_ok "USLAB_STATS_FILE: valid JSON, $msg"
else
	real_bad "USLAB_STATS_FILE: $msg"
fi
if [ -s "$err" ]; then
	real_bad "USLAB_STATS_FILE alone must not print on stderr"
	real_show "$err" stderr
else
	real_ok "USLAB_STATS_FILE alone: nothing on stderr"
fi

# %p: a file per process, named by its pid, which the JSON also gives
env LD_PRELOAD="$USLAB_LIB" USLAB_STATS_FILE="$tmp/each-%p.json" "$PY" -c "$WORK" >"$out" 2>"$err" ||
	real_bad "python3 failed with USLAB_STATS_FILE=...-%p.json"
set -- "$tmp"/each-[0-9]*.json
if [ -f "$1" ] && pid=${1##*/each-} && pid=${pid%.json} &&
	"$PY" -c 'import json, sys; d = json.load(open(sys.argv[1]))
sys.exit(0 if d["pid"] == int(sys.argv[2]) and d["program"] else 1)' "$1" "$pid"; then
	real_ok "USLAB_STATS_FILE with %p: $(basename "$1"), its \"pid\" matching"
else
	real_bad "USLAB_STATS_FILE with %p: no each-<pid>.json with that pid ($*)"
fi

env LD_PRELOAD="$USLAB_LIB" USLAB_STATS_FILE=/nonexistent/dir/s.json "$PY" -c 'print(1)' >"$out" 2>"$err" ||
	real_bad "python3 failed with an unwritable USLAB_STATS_FILE"
if [ "$(cat "$out")" = 1 ] && [ "$(wc -l <"$err")" = 1 ] && grep -q '^uslab: .*/nonexistent/dir/s.json' "$err"; then
	real_ok "unwritable USLAB_STATS_FILE: one message, program fine"
else
	real_bad "unwritable USLAB_STATS_FILE: want one 'uslab:' line naming the path"
	real_show "$err" stderr
fi

# ---- USLAB_STATS_SIGNAL -----------------------------------------------------------------
# A process that allocates in a loop (for at most 30 s) and says when it runs.
LOOP='
import sys, time
print("ready", flush=True)
end = time.time() + 30
n = 0
while time.time() < end:
    x = [bytes(700 + i % 2000) for i in range(2000)]
    n += 1
'
# start_loop ENV... - run the loop in the background with the preload (its
# pid in REAL_BG, its output in $tmp/loop.out and loop.err); wait for it.
start_loop() {
	real_bg_start loop 100 "the allocating loop" env LD_PRELOAD="$USLAB_LIB" "$@" "$PY" -c "$LOOP"
}
# wait_for CMD... - retry for up to 5 s
wait_for() {
	for _ in $(seq 50); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	return 1
}

f=$tmp/signal.json
if start_loop USLAB_STATS_SIGNAL=USR2 USLAB_STATS_FILE="$f"; then
	sleep 0.3
	if [ -e "$f" ]; then
		real_bad "USLAB_STATS_SIGNAL: the file exists before any signal"
	fi
	kill -USR2 "$REAL_BG"
	if wait_for json_ok "$f" && json_ok "$f" | grep -q '^signal report'; then
		real_ok "USLAB_STATS_SIGNAL=USR2: the running process wrote valid JSON ($(json_ok "$f"))"
		cp "$f" "$tmp/first.json"
		sleep 0.2
		kill -USR2 "$REAL_BG"
		if wait_for bash -c "! cmp -s '$f' '$tmp/first.json' && [ -s '$f' ]" && wait_for json_ok "$f"; then
			real_ok "USLAB_STATS_SIGNAL=USR2: a second signal wrote a new dump"
		else
			real_bad "USLAB_STATS_SIGNAL=USR2: no new dump after a second signal"
		fi
	else
		real_bad "USLAB_STATS_SIGNAL=USR2: no valid JSON in $f 5 s after the signal"
		real_show "$tmp/loop.err" "loop stderr"
	fi
	kill -0 "$REAL_BG" 2>/dev/null && real_ok "the process survived both signals" ||
		real_bad "the process died from the signal"
	real_bg_stop
fi

if start_loop USLAB_STATS_SIGNAL=SIGUSR1; then
	kill -USR1 "$REAL_BG"
	if wait_for is_table "$tmp/loop.err"; then
		real_ok "USLAB_STATS_SIGNAL=SIGUSR1 without a file: the table on stderr"
	else
		real_bad "USLAB_STATS_SIGNAL=SIGUSR1 without a file: no table on stderr"
		real_show "$tmp/loop.err" "loop stderr"
	fi
	real_bg_stop
fi

# ---- unknown names, bad values, tool variables -------------------------------------------
# warns NAME EXPECT ENV... - python3 still works; stderr is exactly EXPECT
warns() {
	local what=$1 expect=$2
	shift 2
	env LD_PRELOAD="$USLAB_LIB" "$@" "$PY" -c 'print(sum(range(10)))' >"$out" 2>"$err" || true
	if [ "$(cat "$out")" = 45 ] && [ "$(cat "$err")" = "$expect" ]; then
		real_ok "$what"
	else
		real_bad "$what: stdout '$(cat "$out")', stderr not as expected"
		echo "  want: ${expect:-(nothing)}"
		real_show "$err" stderr
	fi
}
warns "USLAB_FOO=1: one warning line, program works" \
	"uslab: warning: unknown option 'USLAB_FOO=1' ignored (docs/options.md lists them)" USLAB_FOO=1
warns "USLAB_DECAY_MS=soon: one warning line, program works" \
	"uslab: warning: bad value in 'USLAB_DECAY_MS=soon' ignored: expected a whole number from 0 to 2147483647; using 500" USLAB_DECAY_MS=soon
warns "USLAB_TEST_X, USLAB_STRESS_X, USLAB_BENCH_X, USLAB_LIB: silent" "" \
	USLAB_TEST_X=1 USLAB_STRESS_X=2 USLAB_BENCH_X=3 USLAB_LIB="$USLAB_LIB"

# ---- once per process tree: a shell (bash, which has its own putenv) and its
# children - ls, python3 and a python3 subprocess - share the environment: the
# first process warns, the others stay quiet, and a child with a bad entry of its
# own warns about that one only
tree='ls / >/dev/null; "$0" -c "import subprocess; subprocess.run([\"ls\", \"/\"], stdout=subprocess.DEVNULL)"
env | grep -c "^USLAB_WARNED=" >&3 || true; USLAB_BAR=2 bash -c "ls / >/dev/null; ls / >/dev/null"'
env LD_PRELOAD="$USLAB_LIB" USLAB_FOO=1 USLAB_DECAY_MS=soon bash -c "$tree" "$PY" >"$out" 2>"$err" 3>"$tmp/marker" ||
	real_bad "the process tree with bad options failed"
want="uslab: warning: unknown option 'USLAB_FOO=1' ignored (docs/options.md lists them)
uslab: warning: bad value in 'USLAB_DECAY_MS=soon' ignored: expected a whole number from 0 to 2147483647; using 500
uslab: warning: unknown option 'USLAB_BAR=2' ignored (docs/options.md lists them)"
if [ "$(cat "$err")" = "$want" ] && [ "$(cat "$tmp/marker")" = 1 ]; then
	real_ok "bad options in a process tree of 8: each warning once (USLAB_WARNED set for the children)"
else
	real_bad "bad options in a process tree: not each warning exactly once (USLAB_WARNED entries: $(cat "$tmp/marker"))"
	echo "  want: $want" | head -n 3
	real_show "$err" stderr
fi
env LD_PRELOAD="$USLAB_LIB" USLAB_DECAY_MS=250 bash -c 'env | grep -c "^USLAB_WARNED=" || true' >"$out" 2>"$err"
[ "$(cat "$out")" = 0 ] && [ ! -s "$err" ] && real_ok "good options: no warning, no USLAB_WARNED" ||
	real_bad "good options: USLAB_WARNED set ($(cat "$out")) or a warning: $(head -n1 "$err")"

# ---- USLAB_VERBOSE: the version, the dwcas path and every option, at start-up
env LD_PRELOAD="$USLAB_LIB" USLAB_VERBOSE=1 USLAB_DECAY_MS=250 "$PY" -c 'print(sum(range(10)))' \
	>"$out" 2>"$err" || true
if [ "$(cat "$out")" = 45 ] && grep -q '^uslab: version [0-9.]*, pid [0-9]*, double-width CAS: ' "$err" &&
	grep -qx 'uslab: USLAB_DECAY_MS=250 (environment)' "$err" &&
	grep -qx 'uslab: USLAB_STATS=0 (default)' "$err"; then
	real_ok "USLAB_VERBOSE=1: version, dwcas path, options with their source"
else
	real_bad "USLAB_VERBOSE=1: report not as expected"
	real_show "$err" stderr
fi
