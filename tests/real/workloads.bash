# tests/real/workloads.bash - the real-program workloads, defined once for the
# tests (tests/real/<prog>.sh, through real_workload in common.bash) and for
# tools/bench-real, which times the same command lines under each allocator.
#
# Sourced, never run (no .sh suffix, so ctest does not pick it up). For each
# program PROG in $WL_PROGRAMS it defines:
#   wl_needs_PROG   the commands it needs (a missing one skips PROG)
#   wl_PROG         writes PROG's inputs into $REAL_TMP (which must exist and
#                   be exported: some command lines read it when they run),
#                   exports the environment the commands need, and then calls
#                     wl_cmd NAME CMD...      once per command to compare/time
#                   (wl_cmd_sh NAME SCRIPT is wl_cmd NAME bash -c SCRIPT).
# The caller defines wl_cmd: tests/real runs CMD under glibc and under uslab and
# compares (run_both); tools/bench-real records it and times it later. Each CMD
# runs in a fresh, empty directory of its own. Call wl_PROG in a subshell if
# its exports must not leak.
#
# Sizes, for tools/bench-real (unset in the tests, which use the defaults):
#   WL_AWK_RECORDS  awk's input records (default 200000); its array loop
#                   inserts 1.5 times as many keys
#   WL_GCC_FUNCS    functions in gcc's generated source (default 2000)
#   WL_GIT_FILES    files in git's repository (default 3000, at least 300)
#   WL_PY_ITEMS     dict entries in python3's data.py (default 200000; its word
#                   list and list churn scale with it)
#   WL_TAR_FILES    files in tar's tree (default 2000, 50 per directory)

WL_PROGRAMS="awk bc cxx gcc git perl python3 sort sqlite3 tar"

wl_cmd_sh() {
	local name=$1
	shift
	wl_cmd "$name" bash -c "$1"
}

# ---- awk -------------------------------------------------------------------
# awk under uslab: associative arrays of 300,000 keys built, split, deleted and
# rebuilt, string concatenation, sprintf, split() and gsub() over 200,000
# generated records, then a word-frequency report. Runs each distinct awk
# installed - the default awk, mawk, gawk - once: when awk is gawk (or mawk),
# it is not run a second time under its other name.
wl_needs_awk="awk"
wl_awk() {
	local nrec=${WL_AWK_RECORDS:-200000} a p name seen=" "
	export LC_ALL=C

	cat >"$REAL_TMP/work.awk" <<'AWK'
BEGIN {
	seed = 1
	for (i = 0; i < nkeys; i++) {
		seed = (seed * 16807) % 2147483647
		k = sprintf("key%x", seed % 1000003)
		h[k] = h[k] sprintf("%d,", i % 1000)
	}
	n = 0; len = 0
	for (k in h) { n++; len += length(h[k]) }
	printf "keys %d, total %d\n", n, len
	d = 0
	for (k in h) if (length(h[k]) > 4) { delete h[k]; d++ }
	printf "deleted %d\n", d
	for (k in h) { m = split(h[k], parts, ","); cnt[m]++ }
	for (m in cnt) printf "split %d: %d\n", m, cnt[m] | "sort -n -k2"
	close("sort -n -k2")
}
{
	line = $0
	nsub += gsub(/[aeiou]+/, "<&>", line)
	for (f = 1; f <= NF; f++) words[$f]++
	rec[NR % 5000] = line
}
END {
	printf "records %d, substitutions %d\n", NR, nsub
	nw = 0
	for (w in words) { nw++; if (words[w] > max) { max = words[w]; top = w } }
	printf "words %d, most frequent %s (%d)\n", nw, top, max
	s = ""
	for (i = 0; i < 5000; i++) s = s substr(rec[i], 1, 20)
	printf "joined %d\n", length(s)
}
AWK

	awk -v n="$nrec" 'BEGIN {
		srand(3)
		split("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu", w, " ")
		for (i = 0; i < n; i++) {
			line = ""
			for (j = 0; j < 3 + i % 9; j++) line = line w[1 + int(rand() * 12)] int(rand() * 50) " "
			print line
		}
	}' >"$REAL_TMP/records"
	echo "generated $(wc -l <"$REAL_TMP/records") records"

	for a in awk mawk gawk; do
		p=$(command -v "$a" 2>/dev/null) || continue
		p=$(readlink -f "$p")
		[[ "$seen" == *" $p "* ]] && continue
		seen="$seen$p "
		name=${p##*/}
		case $name in mawk | gawk) ;; *) name=$a ;; esac
		wl_cmd "$name" "$a" -v nkeys=$((nrec * 3 / 2)) -f "$REAL_TMP/work.awk" "$REAL_TMP/records"
	done
}

# ---- bc --------------------------------------------------------------------
# bc under uslab: arbitrary-precision arithmetic allocates and frees a number
# for nearly every operation - pi to 1,000 digits, e, square roots, a large
# factorial, big powers and a recursive function.
wl_needs_bc="bc"
wl_bc() {
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

	wl_cmd math bc -lq "$REAL_TMP/work.bc"
}

# ---- cxx -------------------------------------------------------------------
# A C++ program under uslab: new/delete (plain, array, sized and over-aligned),
# std::map/std::string/std::vector/std::unordered_map churn, and std::thread
# workers that hand their objects to the main thread through a mutex-protected
# queue, so most deletes happen on another thread than the new. Compiled here
# with g++; the program checks its own data and prints checksums.
wl_needs_cxx="g++"
wl_cxx() {
	cat >"$REAL_TMP/work.cc" <<'CC'
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

struct alignas(64) Line { std::uint64_t v[8]; };
struct alignas(4096) Page { unsigned char b[4096]; };

struct Node {
	std::string name;
	std::vector<int> data;
	Node(int i) : name("node-" + std::to_string(i) + std::string(i % 90, 'n')), data(i % 33, i) {}
};

static std::mutex mu;
static std::condition_variable cv;
static std::deque<Node *> handoff;
static int producers_left;

static void producer(int t) {
	for (int i = 0; i < 400000; i++) {
		Node *n = new Node(t * 1000000 + i);
		std::lock_guard<std::mutex> g(mu);
		handoff.push_back(n);
		if (handoff.size() > 256) cv.notify_one();
	}
	std::lock_guard<std::mutex> g(mu);
	producers_left--;
	cv.notify_one();
}

static std::uint64_t consume() {
	std::uint64_t sum = 0, n = 0;
	for (;;) {
		std::unique_lock<std::mutex> l(mu);
		cv.wait(l, [] { return !handoff.empty() || producers_left == 0; });
		if (handoff.empty() && producers_left == 0) break;
		std::deque<Node *> batch;
		batch.swap(handoff);
		l.unlock();
		for (Node *p : batch) {
			sum += p->name.size() + p->data.size();
			delete p;
			n++;
		}
	}
	return sum * 1000003 + n;
}

static std::uint64_t worker(int t) {
	std::map<std::string, std::string> m;
	std::unordered_map<int, std::unique_ptr<int[]>> u;
	std::uint64_t h = 0;
	for (int i = 0; i < 300000; i++) {
		m["k" + std::to_string((i * 7919u + t) % 20000u)] += std::string(i % 17 + 1, char('a' + i % 26));
		u[i % 5000].reset(new int[i % 64 + 1]());
		if (i % 3 == 0) m.erase(m.begin());
	}
	for (auto &kv : m) h = h * 31 + kv.first.size() * 7 + kv.second.size();
	return h + u.size();
}

int main() {
	std::vector<Line *> lines;
	for (int i = 0; i < 20000; i++) {
		Line *l = new Line();
		if (reinterpret_cast<std::uintptr_t>(l) % 64) { std::puts("misaligned Line"); return 1; }
		l->v[0] = i;
		lines.push_back(l);
	}
	std::uint64_t ls = 0;
	for (Line *l : lines) { ls += l->v[0]; delete l; }
	std::vector<std::unique_ptr<Page>> pages;
	for (int i = 0; i < 300; i++) {
		pages.emplace_back(new Page());
		if (reinterpret_cast<std::uintptr_t>(pages.back().get()) % 4096) { std::puts("misaligned Page"); return 1; }
		pages.back()->b[i] = 1;
	}
	pages.clear();
	std::printf("aligned %llu\n", (unsigned long long)ls);

	producers_left = 3;
	std::vector<std::thread> th;
	std::uint64_t wres[2];
	for (int t = 0; t < 3; t++) th.emplace_back(producer, t);
	for (int t = 0; t < 2; t++) th.emplace_back([t, &wres] { wres[t] = worker(t); });
	std::uint64_t c = consume();
	for (auto &x : th) x.join();
	std::printf("consumed %llu\n", (unsigned long long)c);
	std::printf("workers %llu %llu\n", (unsigned long long)wres[0], (unsigned long long)wres[1]);

	std::string big;
	for (int i = 0; i < 200000; i++) big += std::to_string(i);
	std::vector<std::string> parts;
	for (std::size_t i = 0; i + 13 < big.size(); i += 13) parts.push_back(big.substr(i, 13 + i % 50));
	std::printf("strings %zu %zu\n", big.size(), parts.size());
	return 0;
}
CC

	echo "compiling work.cc"
	g++ -std=c++17 -O2 -pthread -o "$REAL_TMP/work" "$REAL_TMP/work.cc"
	wl_cmd threads "$REAL_TMP/work"
	wl_cmd_sh compile "g++ -std=c++17 -O2 -pthread -c '$REAL_TMP/work.cc' -o work.o && md5sum <work.o && size work.o"
}

# ---- gcc -------------------------------------------------------------------
# gcc under uslab: compile a generated C file of 2,000 functions with -O2 (cc1
# allocates heavily: GC arenas, obstacks, hash tables), link it and run it.
# The object must be byte-identical to glibc's, and the program must print the
# same checksum.
wl_needs_gcc="gcc size nm"
wl_gcc() {
	local src=$REAL_TMP/gen.c n=${WL_GCC_FUNCS:-2000} i
	{
		echo '#include <stdio.h>'
		echo '#include <string.h>'
		echo 'struct pt { long x, y; char tag[24]; };'
		for i in $(seq 0 $((n - 1))); do
			case $((i % 4)) in
			0) cat <<C
static long f$i(long a) {
	long s = $i;
	for (int k = 0; k < (int)(a & 15) + 3; k++)
		s = s * 31 + (k ^ a) + $((i * 7 % 101));
	return s;
}
C
				;;
			1) cat <<C
static long f$i(long a) {
	switch ((a + $i) % 6) {
	case 0: return a * $i;
	case 1: return a - $((i % 13));
	case 2: return (a << 3) ^ $i;
	case 3: return a / ($((i % 7)) + 1);
	case 4: return a % 1000 + $i;
	default: return -a;
	}
}
C
				;;
			2) cat <<C
static long f$i(long a) {
	struct pt p = { a, a + $i, "" };
	snprintf(p.tag, sizeof p.tag, "f$i-%ld", a % 97);
	return p.x * 3 + p.y + (long)strlen(p.tag);
}
C
				;;
			3) cat <<C
static long f$i(long a) {
	long v[8];
	for (int k = 0; k < 8; k++)
		v[k] = a * k + $i;
	long m = v[0];
	for (int k = 1; k < 8; k++)
		if (v[k] % 5 > m % 5)
			m = v[k];
	return m + f$((i - 1))(a & 255);
}
C
				;;
			esac
		done
		echo 'static long (*const tab[])(long) = {'
		for i in $(seq 0 $((n - 1))); do
			echo "	f$i,"
		done
		echo '};'
		echo 'int main(void) {'
		echo '	unsigned long sum = 0;'
		echo '	for (unsigned i = 0; i < sizeof tab / sizeof tab[0]; i++)'
		echo '		sum = sum * 1099511628211UL + (unsigned long)tab[i]((long)sum & 0xffff);'
		echo '	printf("checksum %lx\n", sum);'
		echo '	return 0;'
		echo '}'
	} >"$src"
	echo "generated $(wc -l <"$src") lines, $n functions"

	wl_cmd_sh compile-O2 "gcc -O2 -Wall -c '$src' -o gen.o && md5sum <gen.o && size gen.o &&
		nm gen.o | md5sum && gcc gen.o -o prog && ./prog"
}

# ---- git -------------------------------------------------------------------
# git under uslab: create a repository of 3,000 files in nested directories,
# commit, change a tenth of them, commit again, then query (log, status,
# ls-files, grep with threads, diff) and gc (pack-objects with 2 threads).
# Identities and dates are fixed, so every object id matches glibc's run.
wl_needs_git="git"
wl_git() {
	# The tree is generated once, outside both runs, and copied in by each.
	local tree=$REAL_TMP/tree n=${WL_GIT_FILES:-3000} d e
	for d in $(seq 0 29); do
		for e in $(seq 0 9); do
			mkdir -p "$tree/dir$d/sub$e"
		done
	done
	awk -v top="$tree" -v n="$n" 'BEGIN {
		for (i = 0; i < n; i++) {
			f = sprintf("%s/dir%d/sub%d/file%04d.txt", top, i % 30, int(i / 30) % 10, i)
			m = 3 + (i * 37) % 40
			for (l = 0; l < m; l++)
				printf "line %d of file %d: %s\n", l, i, substr("abcdefghijklmnopqrstuvwxyz", 1 + (i + l) % 26) > f
			close(f)
		}
	}'
	echo "generated $(find "$tree" -type f | wc -l) files, $(du -sh "$tree" | cut -f1)"

	export HOME=$REAL_TMP GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
	export GIT_AUTHOR_NAME=uslab GIT_AUTHOR_EMAIL=uslab@example.invalid
	export GIT_COMMITTER_NAME=uslab GIT_COMMITTER_EMAIL=uslab@example.invalid
	export GIT_AUTHOR_DATE='2024-01-01T00:00:00Z' GIT_COMMITTER_DATE='2024-01-01T00:00:00Z'
	export LC_ALL=C TZ=UTC

	wl_cmd_sh repo '
		set -euo pipefail
		cp -r "$REAL_TMP/tree" repo && cd repo
		git init -q -b main . && git config gc.auto 0 && git config pack.threads 2
		git add -A && git commit -q -m "'"$n"' files"
		for i in $(seq 0 10 '"$((n - 1))"'); do
			f=$(printf "dir%d/sub%d/file%04d.txt" $((i % 30)) $((i / 30 % 10)) $i)
			echo "changed $i" >>"$f"
		done
		git rm -q -r dir29/sub9
		echo "== status"; git status --porcelain | md5sum
		git add -A && git commit -q -m "change '"$(((n + 9) / 10))"' files, drop one directory"
		echo "== log"; git log --stat --format="%H %s" | tail -n 5; git log --format=%H
		echo "== ls-files"; git ls-files -s | md5sum; git ls-files | wc -l
		echo "== grep"; git grep --threads=2 -c "changed" | md5sum
		echo "== diff"; git diff --stat HEAD~1 HEAD | tail -n 1; git diff HEAD~1 HEAD | md5sum
		git gc -q
		echo "== objects"; git count-objects -v | grep -E "^(count|in-pack|packs)"
		git cat-file --batch-all-objects --batch-check | md5sum
		git fsck --full --no-progress 2>&1
		echo "== archive"; git archive --format=tar HEAD | md5sum
	'
}

# ---- perl ------------------------------------------------------------------
# perl under uslab: hashes of a few hundred thousand keys, regex captures and
# substitutions over generated text, sorts with custom comparators, string
# growth by repeated concatenation, and deep nested structures freed at once.
wl_needs_perl="perl"
wl_perl() {
	# Perl randomises hash order per process; fix it so both runs print the same.
	export PERL_HASH_SEED=0 PERL_PERTURB_KEYS=0 LC_ALL=C

	cat >"$REAL_TMP/work.pl" <<'PL'
use strict; use warnings;
use Digest::MD5 qw(md5_hex);
my $seed = 12345;
sub rnd { $seed = ($seed * 1103515245 + 12345) % 2147483648; return $seed; }

my %h;
for my $i (1 .. 300_000) {
    my $k = sprintf("k%x-%d", rnd(), $i % 977);
    $h{$k} = [ $i, "v" x ($i % 50), { n => $i } ];
}
printf "hash %d\n", scalar keys %h;
my $n = 0;
for my $k (keys %h) { delete $h{$k} if ++$n % 3 == 0 }
printf "after delete %d\n", scalar keys %h;

my $text = '';
for my $i (1 .. 100_000) {
    $text .= sprintf("user%d\@host%d.example.org sent %d bytes at %02d:%02d\n",
                     rnd() % 5000, $i % 37, rnd() % 100000, $i % 24, $i % 60);
}
printf "text %d bytes\n", length $text;
my %bytes;
while ($text =~ /^(\w+)\@(\S+) sent (\d+) bytes/mg) { $bytes{$2} += $3 }
printf "hosts %d, top %s\n", scalar keys %bytes,
    join(",", (sort { $bytes{$b} <=> $bytes{$a} || $a cmp $b } keys %bytes)[0 .. 2]);
(my $t2 = $text) =~ s/(\d+) bytes/sprintf("%x b", $1)/ge;
print "subst ", md5_hex($t2), "\n";
my @lines = split /\n/, $text;
my @sorted = sort { length($a) <=> length($b) || $b cmp $a } @lines;
print "sort ", md5_hex(join "\n", @sorted), "\n";
my @nums = sort { $a <=> $b } map { rnd() } 1 .. 200_000;
print "nums $nums[0] $nums[-1]\n";

my @tree;
for my $i (1 .. 20_000) {
    push @tree, { id => $i, kids => [ map { { v => "x$_" x 3 } } 1 .. ($i % 10) ] };
}
my $total = 0;
$total += scalar @{ $_->{kids} } for @tree;
@tree = ();
print "tree $total\n";
my $s = '';
$s .= chr(65 + $_ % 26) x ($_ % 100) for 1 .. 50_000;
print "grow ", length($s), " ", md5_hex($s), "\n";
PL

	wl_cmd work perl "$REAL_TMP/work.pl"
}

# ---- python3 ---------------------------------------------------------------
# python3 under uslab: a dict/list/str/json workload and a threaded
# producer/consumer workload whose objects are freed by another thread.
# PYTHONMALLOC=malloc sends every object through malloc/free (pymalloc would
# otherwise serve objects up to 512 bytes from its own arenas); the threaded
# workload also runs with the default allocator.
wl_needs_python3="python3"
wl_python3() {
	# The interpreter itself, not a version manager's shim script in front of it.
	local py n=${WL_PY_ITEMS:-200000}
	py=$(python3 -c 'import sys; print(sys.executable)')
	echo "python: $py ($("$py" --version 2>&1))"
	export PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1

	cat >"$REAL_TMP/data.py" <<'PY'
import json, sys, random
N = int(sys.argv[1])   # 200,000 in tests/real
rng = random.Random(1)
d = {}
for i in range(N):
    d["key%07d" % rng.randrange(10**7)] = [i, str(i) * (i % 7), {"v": i * 1.5}]
print("dict", len(d))
s = json.dumps(d, sort_keys=True)
print("json", len(s), hash(s) & 0xffffffff)
back = json.loads(s)
assert back == d, "json round trip changed the data"
print("round trip", len(back))
words = ["".join(chr(97 + (i * j) % 26) for j in range(i % 40 + 1)) for i in range(N // 2)]
joined = " ".join(words)
print("join", len(joined), joined.count("ab"))
srt = sorted(words, key=lambda w: (len(w), w))
print("sorted", srt[0], srt[-1][:20], len(set(words)))
lst = []
for i in range(N * 3 // 2):
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

	wl_cmd data-malloc env PYTHONMALLOC=malloc "$py" "$REAL_TMP/data.py" "$n"
	wl_cmd threads-malloc env PYTHONMALLOC=malloc "$py" "$REAL_TMP/threads.py"
	wl_cmd threads-pymalloc "$py" "$REAL_TMP/threads.py"
}

# ---- sort ------------------------------------------------------------------
# GNU sort under uslab: 500,000 random lines sorted by whole line, by numeric
# key and uniquely, then with --parallel=2 -S 50M (worker threads allocate and
# free each other's line buffers) and with a small buffer that forces temporary
# files and merges.
wl_needs_sort="sort awk"
wl_sort() {
	local in=$REAL_TMP/lines
	awk 'BEGIN {
		srand(7)
		for (i = 0; i < 500000; i++)
			printf "%08x %d %s\n", int(rand() * 4294967296), int(rand() * 1000000),
			       substr("the quick brown fox jumps over the lazy dog", 1 + int(rand() * 40))
	}' >"$in"
	echo "generated $(wc -l <"$in") lines, $(du -h "$in" | cut -f1)"
	export LC_ALL=C

	wl_cmd plain sort "$in"
	wl_cmd numeric-key sort -k2,2n -k1,1 "$in"
	wl_cmd unique sort -u -k3 "$in"
	wl_cmd parallel sort --parallel=2 -S 50M -k2,2n -k1,1r "$in"
	wl_cmd merge sort --parallel=2 -S 2M -T . "$in"
}

# ---- sqlite3 ---------------------------------------------------------------
# sqlite3 under uslab: 200,000 rows inserted in one transaction, two indexes,
# grouping, a self-join, window functions, string aggregation, an update and a
# delete, then VACUUM and an integrity check. The data come from deterministic
# expressions (no random()), so both runs print the same.
wl_needs_sqlite3="sqlite3"
wl_sqlite3() {
	cat >"$REAL_TMP/work.sql" <<'SQL'
PRAGMA cache_size = -20000;
CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, grp TEXT, payload TEXT);
BEGIN;
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000)
INSERT INTO t(id, k, grp, payload)
SELECT x, (x * 2654435761) % 1000003, 'g' || (x % 97),
       substr(hex(zeroblob(1 + x % 60)), 1, 1 + (x * 7) % 100) || x FROM c;
COMMIT;
CREATE INDEX t_k ON t(k);
CREATE INDEX t_grp ON t(grp, k);
SELECT count(*), sum(k), max(length(payload)) FROM t;
SELECT grp, count(*), sum(k) % 1000007 FROM t GROUP BY grp ORDER BY sum(k) DESC LIMIT 5;
SELECT count(*), sum(b.id) FROM t a JOIN t b ON b.k BETWEEN a.k AND a.k + 20 WHERE a.id % 10 = 0;
SELECT id, k, rank() OVER (PARTITION BY grp ORDER BY k DESC) r FROM t
 WHERE grp = 'g13' ORDER BY r, id LIMIT 5;
SELECT length(group_concat(payload, ',')) FROM (SELECT payload FROM t ORDER BY k LIMIT 50000);
UPDATE t SET payload = payload || payload WHERE id % 3 = 0;
DELETE FROM t WHERE k % 5 = 0;
SELECT count(*), sum(length(payload)) FROM t;
VACUUM;
PRAGMA integrity_check;
SQL

	wl_cmd file-db sqlite3 -batch db.sqlite ".read $REAL_TMP/work.sql"
	wl_cmd memory-db sqlite3 -batch :memory: ".read $REAL_TMP/work.sql"
}

# ---- tar -------------------------------------------------------------------
# tar, gzip, xz, find, xargs and md5sum under uslab: archive a generated tree
# of 2,000 files (reproducibly: sorted names, fixed mtime and owner), compress
# it with gzip and with two-threaded xz, unpack both and checksum every file.
wl_needs_tar="tar gzip xz md5sum find xargs"
wl_tar() {
	export LC_ALL=C

	local tree=$REAL_TMP/tree tarflags n=${WL_TAR_FILES:-2000}
	awk -v top="$tree" -v ndirs=$((n / 50)) 'BEGIN {
		for (d = 0; d < ndirs; d++) {
			dir = sprintf("%s/d%02d/e%d", top, d, d % 3)
			system("mkdir -p " dir)
			for (f = 0; f < 50; f++) {
				path = sprintf("%s/f%03d.dat", dir, f)
				n = 20 + (d * 50 + f) * 13 % 300
				for (l = 0; l < n; l++)
					printf "%d %d %d %s\n", d, f, l * l % 9973, substr("0123456789abcdefghijklmnopqrstuvwxyz", 1 + (l * f) % 36) > path
				close(path)
			}
		}
	}'
	echo "generated $(find "$tree" -type f | wc -l) files, $(du -sh "$tree" | cut -f1)"
	tarflags="--sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner"

	wl_cmd_sh find-md5sum "cd '$tree' && find . -type f -print0 | sort -z | xargs -0 -n 100 md5sum"
	wl_cmd_sh tar-gzip "
		set -euo pipefail
		tar $tarflags -C '$tree' -cf tree.tar . && md5sum <tree.tar
		gzip -6 -n -c tree.tar >tree.tar.gz && md5sum <tree.tar.gz
		mkdir out && tar -C out -xzf tree.tar.gz
		cd out && find . -type f -print0 | sort -z | xargs -0 md5sum | md5sum"
	wl_cmd_sh tar-xz "
		set -euo pipefail
		tar $tarflags -C '$tree' -cf - . | xz -3 -T2 -c >tree.tar.xz && md5sum <tree.tar.xz
		xz -T2 -t tree.tar.xz
		mkdir out && xz -d -T2 -c tree.tar.xz | tar -C out -xf -
		cd out && find . -type f -print0 | sort -z | xargs -0 md5sum | md5sum"
}
