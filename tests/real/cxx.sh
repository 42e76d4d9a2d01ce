#!/usr/bin/env bash
# A C++ program under uslab: new/delete (plain, array, sized and over-aligned),
# std::map/std::string/std::vector/std::unordered_map churn, and std::thread
# workers that hand their objects to the main thread through a mutex-protected
# queue, so most deletes happen on another thread than the new. Compiled here
# with g++; the program checks its own data and prints checksums.
set -euo pipefail
source "$(dirname "$0")/common.bash"
real_init cxx
real_need g++

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
run_both threads "$REAL_TMP/work"
run_both_sh compile "g++ -std=c++17 -O2 -pthread -c '$REAL_TMP/work.cc' -o work.o && md5sum <work.o && size work.o"
