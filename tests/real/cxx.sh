#!/usr/bin/env bash
# A C++ program under uslab: new/delete (plain, array, sized and over-aligned),
# std::map/std::string/std::vector/std::unordered_map churn, and std::thread
# workers that hand their objects to the main thread through a mutex-protected
# queue, so most deletes happen on another thread than the new. Compiled here
# with g++; the program checks its own data and prints checksums.
# The workload itself is in workloads.bash, shared with tools/bench-real.
set -euo pipefail
source "$(dirname "$0")/common.bash"
real_init cxx
real_workload cxx
