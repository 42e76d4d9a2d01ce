#!/usr/bin/env bash
# python3 under uslab: a dict/list/str/json workload and a threaded
# producer/consumer workload whose objects are freed by another thread.
# PYTHONMALLOC=malloc sends every object through malloc/free (pymalloc would
# otherwise serve objects up to 512 bytes from its own arenas); the threaded
# workload also runs with the default allocator.
set -euo pipefail
source "$(dirname "$0")/common.bash"
real_init python3
real_need python3
# The interpreter itself, not a version manager's shim script in front of it.
py=$(python3 -c 'import sys; print(sys.executable)')
echo "python: $py ($("$py" --version 2>&1))"
export PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1

cat >"$REAL_TMP/data.py" <<'PY'
import json, sys, random
rng = random.Random(1)
d = {}
for i in range(200_000):
    d["key%07d" % rng.randrange(10**7)] = [i, str(i) * (i % 7), {"v": i * 1.5}]
print("dict", len(d))
s = json.dumps(d, sort_keys=True)
print("json", len(s), hash(s) & 0xffffffff)
back = json.loads(s)
assert back == d, "json round trip changed the data"
print("round trip", len(back))
words = ["".join(chr(97 + (i * j) % 26) for j in range(i % 40 + 1)) for i in range(100_000)]
joined = " ".join(words)
print("join", len(joined), joined.count("ab"))
srt = sorted(words, key=lambda w: (len(w), w))
print("sorted", srt[0], srt[-1][:20], len(set(words)))
lst = []
for i in range(300_000):
    lst.append((i, str(i)))
    if i % 3 == 0:
        lst.pop(-(i % 100) - 1 if len(lst) > 100 else 0)
print("list", len(lst), sum(a for a, _ in lst))
big = [bytes(rng.randrange(1, 100_000)) for _ in range(500)]
print("bytes", sum(map(len, big)))
for k in list(d)[::2]:
    del d[k]
print("del", len(d), sum(v[0] for v in d.values()))
PY

cat >"$REAL_TMP/threads.py" <<'PY'
import threading, queue
N = 4
q = queue.Queue(maxsize=1000)
out = [None] * N

def producer(t):
    for i in range(40_000):
        q.put({"t": t, "i": i, "s": "x" * (i % 300), "l": list(range(i % 20))})
    q.put(None)

def consumer():
    done, n = 0, 0
    while done < N:
        item = q.get()
        if item is None:
            done += 1
            continue
        n += len(item["s"]) + len(item["l"])
    out_total.append(n)

def worker(t):
    local = {}
    for i in range(50_000):
        local[i] = "%d-%d" % (t, i) * (i % 5 + 1)
        if i % 2:
            del local[i - 1]
    out[t] = sum(len(v) for v in local.values())

out_total = []
threads = [threading.Thread(target=producer, args=(t,)) for t in range(N)]
threads.append(threading.Thread(target=consumer))
threads += [threading.Thread(target=worker, args=(t,)) for t in range(N)]
for th in threads:
    th.start()
for th in threads:
    th.join()
print("consumed", out_total)
print("workers", out)
PY

run_both data-malloc env PYTHONMALLOC=malloc "$py" "$REAL_TMP/data.py"
run_both threads-malloc env PYTHONMALLOC=malloc "$py" "$REAL_TMP/threads.py"
run_both threads-pymalloc "$py" "$REAL_TMP/threads.py"
