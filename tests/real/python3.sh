#!/usr/bin/env bash
# python3 under uslab: a dict/list/str/json workload and a threaded
# producer/consumer workload whose objects are freed by another thread.
# PYTHONMALLOC=malloc sends every object through malloc/free (pymalloc would
# otherwise serve objects up to 512 bytes from its own arenas); the threaded
# workload also runs with the default allocator.
# The workload itself is in workloads.bash, shared with tools/bench-real.
set -euo pipefail
source "$(dirname "$0")/common.bash"
real_init python3
real_workload python3
