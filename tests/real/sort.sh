#!/usr/bin/env bash
# GNU sort under uslab: 500,000 random lines sorted by whole line, by numeric
# key and uniquely, then with --parallel=2 -S 50M (worker threads allocate and
# free each other's line buffers) and with a small buffer that forces temporary
# files and merges.
# The workload itself is in workloads.bash, shared with tools/bench-real.
set -euo pipefail
source "$(dirname "$0")/common.bash"
real_init sort
real_workload sort
