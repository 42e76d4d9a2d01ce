#!/usr/bin/env bash
# tar, gzip, xz, find, xargs and md5sum under uslab: archive a generated tree
# of 2,000 files (reproducibly: sorted names, fixed mtime and owner), compress
# it with gzip and with two-threaded xz, unpack both and checksum every file.
# The workload itself is in workloads.bash, shared with tools/bench-real.
set -euo pipefail
source "$(dirname "$0")/common.bash"
real_init tar
real_workload tar
