#!/usr/bin/env bash
# git under uslab: create a repository of 3,000 files in nested directories,
# commit, change a tenth of them, commit again, then query (log, status,
# ls-files, grep with threads, diff) and gc (pack-objects with 2 threads).
# Identities and dates are fixed, so every object id matches glibc's run.
# The workload itself is in workloads.bash, shared with tools/bench-real.
set -euo pipefail
source "$(dirname "$0")/common.bash"
real_init git
real_workload git
