# tests/real/common.bash - helpers for the real-program tests (tests/real/*.sh).
#
# Sourced, never run: ctest globs tests/real/*.sh, so this file has no .sh suffix.
# Most scripts run one real program twice on the same input - once under glibc's
# malloc, once with LD_PRELOAD=$USLAB_LIB - and require the same stdout and the
# same exit status, which must be 0 (a command that fails under glibc too is a
# broken test). It times both runs, wall clock and CPU (user + system, children
# included), for information only: the machine may be busy.
#
#   source "$(dirname "$0")/common.bash"
#   real_init NAME [WHAT]    check USLAB_LIB and the preload, make $REAL_TMP;
#                            WHAT (default "glibc vs LD_PRELOAD=...") heads the log
#   real_need TOOL...        skip (exit 77, "SKIP: ...") if a tool is not installed
#   run_both NAME CMD...     run CMD under both allocators and compare
#   run_both_sh NAME SCRIPT  the same for `bash -c SCRIPT` (bash is preloaded too)
#   real_workload PROG       PROG's workload from workloads.bash (shared with
#                            tools/bench-real): skip if its tools are missing,
#                            make its inputs, run_both each of its commands
#   real_ok MSG, real_bad MSG   a check of a script's own that held / broke
#   real_show FILE LABEL     the head of FILE, indented, after a failure
#   real_at_exit CMD...      run CMD when the script ends (a process to stop)
#   real_skip WHY, real_die WHY   end now: skipped (77), or failed (1)
#
# Scripts that check a tool or an option rather than compare with glibc (stats_env,
# uslabinfo) use real_init, real_ok/real_bad and real_show, and no run_both.
#
# Each run of run_both starts in its own fresh, empty directory (so a command
# that creates files does not see the other run's); inputs shared by both runs
# go in $REAL_TMP. A mismatch prints a FAIL line with the head of the diff and
# both stderr tails, and the script exits 1 once all its comparisons have run.
# Environment: REAL_TIMEOUT (seconds per run, default 120), REAL_KEEP=1 keeps
# $REAL_TMP for inspection.

REAL_NAME=
REAL_TMP=
REAL_RUNS=0      # comparisons with glibc
REAL_CHECKS=0    # checks of the script's own
REAL_FAILS=0     # of either
REAL_DONE=0
REAL_AT_EXIT=()

real_die() {
	echo "FAIL: ${REAL_NAME:-real}: $*"
	REAL_DONE=1
	exit 1
}

_real_exit() {
	local rc=$? cmd
	for cmd in "${REAL_AT_EXIT[@]}"; do
		eval "$cmd" || true
	done
	if [ -n "$REAL_TMP" ] && [ -d "$REAL_TMP" ]; then
		if [ "${REAL_KEEP:-0}" = 1 ]; then
			echo "kept $REAL_TMP"
		else
			rm -rf "$REAL_TMP"
		fi
	fi
	[ "$REAL_DONE" = 1 ] && exit "$rc"	# skipped, or real_die said why
	[ "$rc" = 0 ] && [ "$REAL_FAILS" -gt 0 ] && rc=1
	local what=
	[ "$REAL_RUNS" -gt 0 ] && what="$REAL_RUNS comparisons with glibc"
	[ "$REAL_CHECKS" -gt 0 ] && what="${what:+$what, }$REAL_CHECKS checks"
	if [ "$rc" = 0 ]; then
		echo "PASS: $REAL_NAME (${what:-nothing checked})"
	else
		echo "FAIL: $REAL_NAME ($REAL_FAILS of ${what:-0 checks} failed, exit $rc)"
	fi
	exit "$rc"
}

real_ok() {
	REAL_CHECKS=$((REAL_CHECKS + 1))
	echo "ok: $*"
}

real_bad() {
	REAL_CHECKS=$((REAL_CHECKS + 1))
	REAL_FAILS=$((REAL_FAILS + 1))
	echo "FAIL: $REAL_NAME: $*"
}

real_show() {
	[ -s "$1" ] || return 0
	echo "  --- $2 (first 15 lines) ---"
	head -n 15 "$1" | sed 's/^/  | /'
}

# real_at_exit CMD... - CMD is run (with eval) when the script ends, however
# it ends, before $REAL_TMP goes.
real_at_exit() {
	REAL_AT_EXIT+=("$*")
}

# real_bg_start NAME TRIES WHAT CMD... - run CMD in the background, its stdout
# and stderr in $REAL_TMP/NAME.out and NAME.err and its pid in REAL_BG, and
# wait up to TRIES x 0.1 s for it to print "ready"; if it does not, the test
# fails ("WHAT did not start") and this returns 1. real_bg_stop ends it; so
# does the script's end.
REAL_BG=
real_bg_start() {
	local name=$1 tries=$2 what=$3
	shift 3
	[ -n "${_real_bg_armed:-}" ] || {
		real_at_exit 'real_bg_stop'
		_real_bg_armed=1
	}
	"$@" >"$REAL_TMP/$name.out" 2>"$REAL_TMP/$name.err" &
	REAL_BG=$!
	for _ in $(seq "$tries"); do
		grep -q ready "$REAL_TMP/$name.out" 2>/dev/null && return 0
		sleep 0.1
	done
	real_bad "$what did not start"
	return 1
}
real_bg_stop() {
	[ -n "$REAL_BG" ] || return 0
	kill "$REAL_BG" 2>/dev/null || true
	wait "$REAL_BG" 2>/dev/null || true
	REAL_BG=
}

# real_skip WHY - the test cannot check here: exit 77, which ctest reports as
# skipped (SKIP_RETURN_CODE), not passed.
real_skip() {
	echo "SKIP: $REAL_NAME: $*"
	REAL_DONE=1
	exit 77
}

real_need() {
	local t
	for t in "$@"; do
		command -v "$t" >/dev/null 2>&1 || real_skip "'$t' is not installed"
	done
}

real_init() {
	REAL_NAME=$1
	local what=${2:-}
	trap _real_exit EXIT
	[ -n "${USLAB_LIB:-}" ] ||
		real_die "USLAB_LIB is not set (ctest sets it to the path of libuslab-malloc.so)"
	[ -f "$USLAB_LIB" ] ||
		real_die "USLAB_LIB=$USLAB_LIB does not exist (build the 'uslab' target first)"
	USLAB_LIB=$(readlink -f "$USLAB_LIB")
	export USLAB_LIB
	unset LD_PRELOAD

	# The loader only warns when a preload fails; make sure it took, and that
	# libc's own calls to malloc are bound to uslab, not to glibc's malloc.
	local out
	out=$(LD_PRELOAD=$USLAB_LIB bash -c 'grep -F "$USLAB_LIB" /proc/$$/maps' 2>&1) ||
		real_die "LD_PRELOAD=$USLAB_LIB did not map the library: ${out:-no output}"
	out=$(LD_PRELOAD=$USLAB_LIB LD_BIND_NOW=1 LD_DEBUG=bindings /bin/true 2>&1 |
		grep -F "symbol \`malloc'" | grep -F "libc.so" || true)
	case "$out" in
	*"$USLAB_LIB"*) ;;
	*) real_die "libc's malloc is not bound to $USLAB_LIB under LD_PRELOAD: ${out:-no binding seen}" ;;
	esac

	REAL_TMP=$(mktemp -d "${TMPDIR:-/tmp}/uslab-real-$REAL_NAME.XXXXXX")
	export REAL_TMP
	echo "== $REAL_NAME: ${what:-glibc vs LD_PRELOAD=$USLAB_LIB}${USLAB_DWCAS:+ (USLAB_DWCAS=$USLAB_DWCAS)}"
}

# _real_run WHICH NAME CMD... - one run; sets _rc, _secs (wall) and _cpu
# (user + system of the run and its children).
_real_run() {
	local which=$1 name=$2 dir t TIMEFORMAT='%2R %2U %2S'
	shift 2
	dir=$REAL_TMP/runs/$name.$which
	mkdir -p "$dir"
	local pre=()
	[ "$which" = uslab ] && pre=(env LD_PRELOAD="$USLAB_LIB")
	set +e
	{ time (cd "$dir" && timeout -k 5 "${REAL_TIMEOUT:-120}" "${pre[@]}" "$@" \
		>"$REAL_TMP/$name.$which.out" 2>"$REAL_TMP/$name.$which.err" </dev/null); } \
		2>"$REAL_TMP/$name.$which.time"
	_rc=$?
	set -e
	t=$(tail -n 1 "$REAL_TMP/$name.$which.time")
	_secs=${t%% *}
	_cpu=$(awk '{ printf "%.2f", $2 + $3 }' <<<"$t")
}

_real_tail() {
	local f=$1 label=$2
	[ -s "$f" ] || return 0
	echo "  --- $label (last 15 lines) ---"
	tail -n 15 "$f" | sed 's/^/  | /'
}

# run_both NAME CMD... - NAME is a short word naming this comparison.
run_both() {
	local name=$1 grc gsecs gcpu bad=
	shift
	REAL_RUNS=$((REAL_RUNS + 1))
	local what="$*"
	what=${what//[$'\n\t']/ }
	echo "-- $name: ${what//  / }" | tr -s ' ' | cut -c1-150
	_real_run glibc "$name" "$@"
	grc=$_rc gsecs=$_secs gcpu=$_cpu
	_real_run uslab "$name" "$@"
	local o=$REAL_TMP/$name
	echo "   glibc $gsecs s, uslab $_secs s (cpu $gcpu s / $_cpu s; exit $grc / $_rc;" \
		"$(wc -l <"$o.glibc.out") lines of output)"

	[ "$grc" = 124 ] && bad="the glibc run timed out after ${REAL_TIMEOUT:-120} s (test too slow?)"
	[ "$_rc" = 124 ] && bad="the uslab run timed out after ${REAL_TIMEOUT:-120} s (hang or deadlock?)"
	[ -z "$bad" ] && [ "$grc" != 0 ] && bad="the glibc run itself failed (exit $grc): the test is broken"
	[ -z "$bad" ] && [ "$grc" != "$_rc" ] && bad="exit status differs: glibc $grc, uslab $_rc"
	[ "$_rc" -gt 128 ] && [ "$_rc" != "$grc" ] && bad="$bad (the uslab run died of signal $((_rc - 128)): $(kill -l $((_rc - 128)) 2>/dev/null || echo '?'))"
	[ -z "$bad" ] && ! cmp -s "$o.glibc.out" "$o.uslab.out" && bad="stdout differs"
	if [ -z "$bad" ] && grep -qE '^uslab:|cannot be preloaded' "$o.uslab.err"; then
		bad="the uslab run complained on stderr: $(grep -m1 -E '^uslab:|cannot be preloaded' "$o.uslab.err")"
	fi
	if [ -z "$bad" ]; then
		[ "${REAL_KEEP:-0}" = 1 ] || rm -rf "$o".* "$REAL_TMP/runs/$name".*
		return 0
	fi
	REAL_FAILS=$((REAL_FAILS + 1))
	echo "FAIL: $REAL_NAME/$name: $bad"
	if ! cmp -s "$o.glibc.out" "$o.uslab.out"; then
		echo "  --- diff glibc uslab (first 20 lines) ---"
		diff "$o.glibc.out" "$o.uslab.out" | head -n 20 | sed 's/^/  | /' || true
	fi
	_real_tail "$o.glibc.err" "glibc stderr"
	_real_tail "$o.uslab.err" "uslab stderr"
	return 0
}

run_both_sh() {
	local name=$1
	shift
	run_both "$name" bash -c "$1"
}

real_workload() {
	local prog=$1 needs
	source "$(dirname "${BASH_SOURCE[0]}")/workloads.bash"
	needs=wl_needs_$prog
	[ -n "${!needs+set}" ] || real_die "workloads.bash defines no workload '$prog'"
	# shellcheck disable=SC2086 # a list of command names
	real_need ${!needs}
	wl_cmd() { run_both "$@"; }
	"wl_$prog"
}
