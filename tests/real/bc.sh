#!/usr/bin/env bash
# bc under uslab: arbitrary-precision arithmetic allocates and frees a number
# for nearly every operation - pi to 1,000 digits, e, square roots, a large
# factorial, big powers and a recursive function.
set -euo pipefail
source "$(dirname "$0")/common.bash"
real_init bc
real_need bc
export BC_LINE_LENGTH=0

cat >"$REAL_TMP/work.bc" <<'BC'
scale = 1000
p = 4 * a(1)
length(p)
p
scale = 600
e(1)
sqrt(2) + sqrt(3) + sqrt(5)
l(10)
scale = 0
define f(n) { if (n <= 1) return 1; return n * f(n - 1); }
x = f(2000)
length(x)
x % 1000000007
y = 3 ^ 40000
length(y)
y % 998244353
define fib(n) { auto a, b, t, i; a = 0; b = 1; for (i = 0; i < n; i++) { t = a + b; a = b; b = t; }; return a; }
z = fib(20000)
length(z)
z % 1000000009
s = 0
for (i = 1; i <= 20000; i++) s = s + (i ^ 3) / (i + 1)
s
BC

run_both math bc -lq "$REAL_TMP/work.bc"
