#!/usr/bin/env bash
# stats_signal.sh - USLAB_STATS_SIGNAL answers at once, from an idle process:
# a python3 that made its blocks and sleeps (no allocation, so no slow path
# that deferred work could use) gets the signal and the report is there within
# a second, each time (a new file each time, renamed into place), with its
# 100 large blocks; without a file the table goes to stderr. Then
# tools/uslabinfo --pid (one report), --watch with --count (several), --watch
# until the process exits, and its errors (a process started without the
# variables, no such process).
set -euo pipefail
source "$(dirname "$0")/common.bash"
unset USLAB_STATS USLAB_STATS_FILE USLAB_STATS_SIGNAL
real_init stats_signal "live reports from idle processes"
real_need python3
PY=$(python3 -c 'import sys; print(sys.executable)')   # the interpreter, not a shim
SCRIPT=$(cd "$(dirname "$0")/../.." && pwd)/tools/uslabinfo
TOOL() { "$PY" "$SCRIPT" "$@"; }
tmp=$REAL_TMP
echo "LD_PRELOAD=$USLAB_LIB, python $PY"

# Blocks of every kind (PYTHONMALLOC=malloc: the small objects too), then sleep:
# idle from then on.
IDLE='
import sys, time
big = [bytearray(200000) for i in range(100)]
small = [str(i) * 3 for i in range(50000)]
print("ready", flush=True)
time.sleep(float(sys.argv[1]))
'
# start_idle SECONDS ENV... - run IDLE in the background with the preload
# (its pid in REAL_BG, its output in $tmp/idle.out and idle.err); wait for it.
start_idle() {
	local secs=$1
	shift
	real_bg_start idle 300 "the idle process" \
		env LD_PRELOAD="$USLAB_LIB" PYTHONMALLOC=malloc "$@" "$PY" -c "$IDLE" "$secs"
}
now_ms() { date +%s%3N; }
inode() { stat -c %i "$1" 2>/dev/null || echo none; }

# ---- the signal, to a file --------------------------------------------------------------
f=$tmp/live-%p.json
if start_idle 60 USLAB_STATS_SIGNAL=USR2 USLAB_STATS_FILE="$f"; then
	f=$tmp/live-$REAL_BG.json
	worst=0
	for round in 1 2 3; do
		before=$(inode "$f")
		t0=$(now_ms)
		kill -USR2 "$REAL_BG"
		while [ "$(inode "$f")" = "$before" ] && [ $(($(now_ms) - t0)) -lt 3000 ]; do
			sleep 0.01
		done
		took=$(($(now_ms) - t0))
		[ "$took" -gt "$worst" ] && worst=$took
		[ "$(inode "$f")" != "$before" ] || break
	done
	if [ "$(inode "$f")" != "$before" ] && [ "$worst" -lt 1000 ]; then
		real_ok "an idle process answered 3 signals, each within a second (slowest ${worst} ms)"
	else
		real_bad "an idle process did not answer a signal within a second (${worst} ms)"
		real_show "$tmp/idle.err" stderr
	fi
	if msg=$("$PY" - "$f" "$REAL_BG" <<'PY' 2>&1
import json, sys
d = json.load(open(sys.argv[1]))
assert d["report"] == "signal", d.get("report")
assert d["pid"] == int(sys.argv[2]), d["pid"]
assert d["large_blocks"] >= 100, d["large_blocks"]
assert d["large_bytes"] >= 100 * 200000, d["large_bytes"]
parts = ("objects_bytes", "cached_bytes", "slab_free_bytes", "large_bytes", "large_kept_bytes", "huge_bytes",
         "huge_cached_bytes", "startup_arena_cut_bytes", "dirty_bytes", "segment_header_bytes",
         "metadata_bytes")
assert sum(d[k] for k in parts) == d["total_committed_bytes"], "the account does not add up"
assert 0 < d["metadata_bytes"] <= d["metadata_mapped_bytes"], "metadata"
live = sum(c["live_objects"] for c in d["caches"])
assert live >= 50000, live
# the counters, as the thread last folded them: the 50000 strings and the
# 100 bytearrays' headers at least were allocated, and not all freed
counters = ("alloc_fast", "alloc_slow", "free_fast", "free_local", "free_remote", "new_slab")
missing = [c["name"] for c in d["caches"] if any(k not in c for k in counters)]
assert not missing, "caches without counters: %s" % missing
allocs = sum(c["alloc_fast"] + c["alloc_slow"] for c in d["caches"])
frees = sum(c["free_fast"] + c["free_local"] + c["free_remote"] for c in d["caches"])
assert allocs >= 50100, allocs
assert allocs - frees >= 50000, (allocs, frees)
assert all(c["new_slab"] >= c["slabs"] for c in d["caches"]), "fewer slabs made than held"
print("%d large blocks, %d live objects in %d caches, %d allocations, %d frees" % (
    d["large_blocks"], live, len(d["caches"]), allocs, frees))
PY
	); then
		real_ok "the snapshot: $msg, the account adds up"
	else
		real_bad "the snapshot is not as expected: $msg"
	fi

	# ---- uslabinfo --pid ---------------------------------------------------------------
	t0=$(now_ms)
	if TOOL --pid "$REAL_BG" >"$tmp/pid.out" 2>"$tmp/pid.err" &&
		grep -qE "^uslab [0-9.]+, dwcas [^,]+, pid $REAL_BG, python3?[^:]*: .*\(live snapshot" "$tmp/pid.out" &&
		grep -qE '^large blocks +- +1[0-9][0-9] ' "$tmp/pid.out" &&
		grep -qE '^  memory committed ' "$tmp/pid.out"; then
		real_ok "uslabinfo --pid: the idle process's table, large blocks included ($(($(now_ms) - t0)) ms)"
	else
		real_bad "uslabinfo --pid: no table of the idle process"
		real_show "$tmp/pid.out" stdout
		real_show "$tmp/pid.err" stderr
	fi
	if TOOL --pid "$REAL_BG" --watch 0.2 --count 3 -n 5 --plot "$tmp/watch.svg" >"$tmp/watch.out" \
		2>"$tmp/watch.err" && [ "$(grep -c "^uslab .*, pid $REAL_BG, " "$tmp/watch.out")" = 3 ] &&
		grep -q "seconds, 3 reports of pid $REAL_BG<" "$tmp/watch.svg"; then
		real_ok "uslabinfo --watch 0.2 --count 3 --plot: three reports, drawn over time"
	else
		real_bad "uslabinfo --watch 0.2 --count 3: not three reports"
		real_show "$tmp/watch.err" stderr
	fi
	real_bg_stop
fi

# --watch until the process exits
if start_idle 2 USLAB_STATS_SIGNAL=USR1 USLAB_STATS_FILE="$tmp/short.json"; then
	rc=0
	TOOL --pid "$REAL_BG" --watch 0.3 >"$tmp/w.out" 2>"$tmp/w.err" || rc=$?
	n=$(grep -c "^uslab .*, pid $REAL_BG, " "$tmp/w.out" || true)
	if [ "$rc" = 0 ] && [ "$n" -ge 2 ] && grep -q "process $REAL_BG exited" "$tmp/w.err"; then
		real_ok "uslabinfo --watch: $n reports, then 'exited' and status 0 when the process ends"
	else
		real_bad "uslabinfo --watch until exit: status $rc, $n reports"
		real_show "$tmp/w.err" stderr
	fi
	real_bg_stop
fi

# ---- the signal without a file: the table on stderr ------------------------------------------
if start_idle 60 USLAB_STATS_SIGNAL=USR2; then
	kill -USR2 "$REAL_BG"
	for _ in $(seq 100); do
		grep -q '^total ' "$tmp/idle.err" && break
		sleep 0.01
	done
	if grep -qE '^uslab statistics \(dwcas: [^)]+\), pid [0-9]+, .*\(live snapshot' "$tmp/idle.err" &&
		grep -qE '^large blocks +- +1[0-9][0-9] ' "$tmp/idle.err" && grep -q '^total ' "$tmp/idle.err" &&
		grep -qE '^kmalloc-[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9.]+ [KMG]?i?B +[0-9.]+ [KMG]?i?B +[0-9.]+% +[0-9]+ +[0-9]+ +[0-9.]+%$' "$tmp/idle.err" &&
		grep -qE '^  metadata +[0-9.]+ [KMG]?i?B ' "$tmp/idle.err"; then
		real_ok "without USLAB_STATS_FILE: the snapshot table, with counters and metadata, on the idle process's stderr within a second"
	else
		real_bad "without USLAB_STATS_FILE: no table on stderr within a second"
		real_show "$tmp/idle.err" stderr
	fi
	rc=0
	TOOL --pid "$REAL_BG" >"$tmp/e.out" 2>"$tmp/e.err" || rc=$?
	[ "$rc" = 1 ] && grep -q "has no USLAB_STATS_FILE" "$tmp/e.err" &&
		real_ok "uslabinfo --pid without USLAB_STATS_FILE: $(cat "$tmp/e.err")" ||
		real_bad "uslabinfo --pid without USLAB_STATS_FILE: status $rc, $(cat "$tmp/e.err")"
	real_bg_stop
fi

# ---- uslabinfo --pid errors -----------------------------------------------------------------
sleep 30 &
plain=$!
rc=0
TOOL --pid "$plain" >"$tmp/e.out" 2>"$tmp/e.err" || rc=$?
kill "$plain" 2>/dev/null; wait "$plain" 2>/dev/null || true
[ "$rc" = 1 ] && grep -q "has no USLAB_STATS_SIGNAL" "$tmp/e.err" && [ ! -s "$tmp/e.out" ] &&
	real_ok "uslabinfo --pid of a process without the variables: $(cat "$tmp/e.err")" ||
	real_bad "uslabinfo --pid of a process without the variables: status $rc, $(cat "$tmp/e.err")"
rc=0
TOOL --pid 999999999 >"$tmp/e.out" 2>"$tmp/e.err" || rc=$?
[ "$rc" = 1 ] && grep -q "no process 999999999" "$tmp/e.err" &&
	real_ok "uslabinfo --pid of no process: $(cat "$tmp/e.err")" ||
	real_bad "uslabinfo --pid of no process: status $rc, $(cat "$tmp/e.err")"
