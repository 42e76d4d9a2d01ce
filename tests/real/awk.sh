#!/usr/bin/env bash
# awk under uslab: associative arrays of 300,000 keys built, split, deleted and
# rebuilt, string concatenation, sprintf, split() and gsub() over generated
# records, then a word-frequency report. Runs whichever awk is installed (mawk
# or gawk), and gawk as well when present.
# The workload itself is in workloads.bash, shared with tools/bench-real.
set -euo pipefail
source "$(dirname "$0")/common.bash"
real_init awk
real_workload awk
