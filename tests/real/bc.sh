#!/usr/bin/env bash
# bc under uslab: arbitrary-precision arithmetic allocates and frees a number
# for nearly every operation - pi to 1,000 digits, e, square roots, a large
# factorial, big powers and a recursive function.
# The workload itself is in workloads.bash, shared with tools/bench-real.
set -euo pipefail
source "$(dirname "$0")/common.bash"
real_init bc
real_workload bc
