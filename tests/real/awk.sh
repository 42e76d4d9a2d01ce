#!/usr/bin/env bash
# awk under uslab: associative arrays of 300,000 keys built, split, deleted and
# rebuilt, string concatenation, sprintf, split() and gsub() over 200,000
# generated records, then a word-frequency report. Runs each distinct awk
# installed - the default awk, mawk, gawk - once: when awk is gawk (or mawk),
# it is not run a second time under its other name.
# The workload itself is in workloads.bash, shared with tools/bench-real.
set -euo pipefail
source "$(dirname "$0")/common.bash"
real_init awk
real_workload awk
