#!/usr/bin/env bash
# gcc under uslab: compile a generated C file of 2,000 functions with -O2 (cc1
# allocates heavily: GC arenas, obstacks, hash tables), link it and run it.
# The object must be byte-identical to glibc's, and the program must print the
# same checksum.
# The workload itself is in workloads.bash, shared with tools/bench-real.
set -euo pipefail
source "$(dirname "$0")/common.bash"
real_init gcc
real_workload gcc
