// SPDX-License-Identifier: MIT
//
// bench_shim.cc - the C API of bench.h over Google Benchmark.
//
// The timed loop is one batch: the first bench_keep_running() that reaches
// the shim starts the library's loop with KeepRunningBatch(max_iterations)
// (which waits at the threads' start barrier and starts the timer) and hands
// the count to the inline countdown in bench.h; the call after the countdown
// ends asks for one more, which makes the library stop the timer, wait at the
// stop barrier and return false. The library sees exactly max_iterations.
#include "bench.h"

#include <benchmark/benchmark.h>

#include <string>
#include <vector>

namespace {

benchmark::State &st(const bench_state *s)
{
	return *static_cast<benchmark::State *>(s->impl);
}

benchmark::internal::Benchmark *bm(bench_handle *b)
{
	return reinterpret_cast<benchmark::internal::Benchmark *>(b);
}

bench_handle *handle(benchmark::internal::Benchmark *b)
{
	return reinterpret_cast<bench_handle *>(b);
}

benchmark::TimeUnit time_unit(enum bench_unit u)
{
	switch (u) {
	case BENCH_US: return benchmark::kMicrosecond;
	case BENCH_MS: return benchmark::kMillisecond;
	case BENCH_S:  return benchmark::kSecond;
	case BENCH_NS: break;
	}
	return benchmark::kNanosecond;
}

// The library's display reporter, counting the runs that ended in an error.
class ErrorCounter : public benchmark::BenchmarkReporter {
public:
	explicit ErrorCounter(benchmark::BenchmarkReporter *inner) : inner_(inner) {}

	bool ReportContext(const Context &context) override
	{
		return inner_->ReportContext(context);
	}
	void ReportRuns(const std::vector<Run> &runs) override
	{
		for (const Run &r : runs)
			errors += r.error_occurred;
		inner_->ReportRuns(runs);
	}
	void Finalize() override { inner_->Finalize(); }

	int errors = 0;

private:
	benchmark::BenchmarkReporter *inner_;
};

} // namespace

extern "C" {

bool __bench_loop_edge(bench_state *s)
{
	benchmark::State &state = st(s);

	if (!s->started) {
		s->started = true;
		if (state.KeepRunningBatch(state.max_iterations)) {
			s->left = (uint64_t)state.max_iterations - 1;
			return true;
		}
		return false;   // skipped with an error before the loop
	}
	// All max_iterations ran: this call stops the timer and returns false.
	return state.KeepRunningBatch(1);
}

void bench_pause_timing(bench_state *s)  { st(s).PauseTiming(); }
void bench_resume_timing(bench_state *s) { st(s).ResumeTiming(); }

void bench_skip_with_error(bench_state *s, const char *msg)
{
	st(s).SkipWithError(msg);
	s->left = 0;
}

int64_t bench_range(const bench_state *s, int i) { return st(s).range((std::size_t)i); }

int64_t bench_iterations(const bench_state *s)
{
	// The library counted the whole batch when the loop started.
	return (int64_t)st(s).iterations() - (int64_t)s->left;
}

int bench_thread_index(const bench_state *s) { return st(s).thread_index(); }
int bench_threads(const bench_state *s)      { return st(s).threads(); }

void bench_set_items_processed(bench_state *s, int64_t items) { st(s).SetItemsProcessed(items); }
void bench_set_bytes_processed(bench_state *s, int64_t bytes) { st(s).SetBytesProcessed(bytes); }
void bench_set_label(bench_state *s, const char *label)       { st(s).SetLabel(label); }

void bench_counter(bench_state *s, const char *name, double value, unsigned flags)
{
	int f = benchmark::Counter::kDefaults;

	if (flags & BENCH_COUNTER_RATE)
		f |= benchmark::Counter::kIsRate;
	if (flags & BENCH_COUNTER_AVG_THREADS)
		f |= benchmark::Counter::kAvgThreads;
	if (flags & BENCH_COUNTER_PER_ITER)
		f |= benchmark::Counter::kAvgIterations;
	st(s).counters[name] = benchmark::Counter(value, (benchmark::Counter::Flags)f);
}

bench_handle *bench_register(const char *name, bench_fn fn, const struct bench_opts *o)
{
	benchmark::internal::Benchmark *b =
		benchmark::RegisterBenchmark(name, [fn](benchmark::State &state) {
			bench_state s = { 0, false, &state };
			fn(&s);
		});

	for (int i = 0; i < o->nargs && i < BENCH_MAX_LIST; i++)
		b->Arg(o->args[i]);
	if (o->range[0] || o->range[1]) {
		if (o->range_multiplier)
			b->RangeMultiplier(o->range_multiplier);
		b->Range(o->range[0], o->range[1]);
	}
	if (o->arg_name)
		b->ArgName(o->arg_name);
	for (int i = 0; i < o->nthreads && i < BENCH_MAX_LIST; i++)
		b->Threads(o->threads[i]);
	if (o->real_time)
		b->UseRealTime();
	if (o->process_cpu_time)
		b->MeasureProcessCPUTime();
	if (o->min_time > 0)
		b->MinTime(o->min_time);
	if (o->iterations > 0)
		b->Iterations(o->iterations);
	if (o->repetitions > 0)
		b->Repetitions(o->repetitions);
	b->Unit(time_unit(o->unit));
	return handle(b);
}

bench_handle *bench_handle_args(bench_handle *b, const int64_t *args, int n)
{
	return handle(bm(b)->Args(std::vector<int64_t>(args, args + n)));
}

bench_handle *bench_handle_arg_names(bench_handle *b, const char *const *names, int n)
{
	return handle(bm(b)->ArgNames(std::vector<std::string>(names, names + n)));
}

bench_handle *bench_handle_threads(bench_handle *b, int threads)
{
	return handle(bm(b)->Threads(threads));
}

int bench_run(int argc, char **argv)
{
	benchmark::Initialize(&argc, argv);
	if (benchmark::ReportUnrecognizedArguments(argc, argv))
		return 1;
	ErrorCounter display(benchmark::CreateDefaultDisplayReporter());
	benchmark::RunSpecifiedBenchmarks(&display);
	benchmark::Shutdown();
	// A benchmark that called bench_skip_with_error (e.g. a check after its
	// loop failed) makes the process fail, so ctest's smoke runs catch it.
	return display.errors ? 1 : 0;
}

// Weak: a benchmark file may define its own main() and call bench_run().
__attribute__((weak)) int main(int argc, char **argv)
{
	return bench_run(argc, argv);
}

} // extern "C"
