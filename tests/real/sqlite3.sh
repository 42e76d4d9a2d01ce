#!/usr/bin/env bash
# sqlite3 under uslab: 200,000 rows inserted in one transaction, two indexes,
# grouping, a self-join, window functions, string aggregation, an update and a
# delete, then VACUUM and an integrity check. The data come from deterministic
# expressions (no random()), so both runs print the same.
# The workload itself is in workloads.bash, shared with tools/bench-real.
set -euo pipefail
source "$(dirname "$0")/common.bash"
real_init sqlite3
real_workload sqlite3
