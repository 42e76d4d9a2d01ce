#!/usr/bin/env bash
# perl under uslab: hashes of a few hundred thousand keys, regex captures and
# substitutions over generated text, sorts with custom comparators, string
# growth by repeated concatenation, and deep nested structures freed at once.
# The workload itself is in workloads.bash, shared with tools/bench-real.
set -euo pipefail
source "$(dirname "$0")/common.bash"
real_init perl
real_workload perl
