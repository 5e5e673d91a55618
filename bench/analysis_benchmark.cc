// Analyzer benchmarks: replay throughput, the analysis pipeline, and sweep scaling,
// all on a synthetic training-like .fslog written once per process.
//
//   BM_ReplayFslog        reads an .fslog and replays it through the allocator (no hooks):
//                         events per second on one core (plus a background reader thread when a
//                         core is free for it). Target >= 20 M events/s.
//   BM_ReplayFslogCallingThread  the same, reading on the replay's thread.
//   BM_ReplayWithMetrics  the same with the metrics and OOM collectors of `fragscope analyze`.
//   BM_Sweep/threads      6 max_split_size_mb configurations over the same log, 1..N threads.
//
// The synthetic job (WriteSyntheticLog): a training loop whose "steps" allocate per-layer
// activations of a sequence length drawn per step, keep them until a backward pass frees them in
// reverse, with small temporaries and a few large persistent tensors; every allocator event is
// logged (alloc, free_requested, free_completed, segment events, markers).
//
// Also a generator for the 100 M-event run of bench/RESULTS.md:
//   analysis_benchmark --write_synthetic_log=PATH --events=100000000
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "analysis/analyzer.h"
#include "analysis/explain/oom_collector.h"
#include "analysis/explain/oom_explainer.h"
#include "analysis/explain/sweep.h"
#include "analysis/metrics/metrics.h"
#include "analysis/replay/hook_list.h"
#include "analysis/replay/replay.h"
#include "analysis/report/fslog_file_writer.h"
#include "analysis/sources/fslog_source.h"
#include "benchmark/benchmark.h"

namespace fragscope {
namespace {

constexpr uint64_t kCapacityBytes = 80 * kGiB;

// Writes about `events` events of a synthetic training job to `path`. Returns the count.
uint64_t WriteSyntheticLog(const std::string& path, uint64_t events) {
  FslogHeader header;
  header.device_total_bytes = kCapacityBytes;
  header.device_name = "synthetic 80 GiB GPU";
  header.start_monotonic_ns = 1'000'000'000;
  std::unique_ptr<FslogFileWriter> log = *FslogFileWriter::Open(path, header);
  SimulatedBackend backend(kCapacityBytes);
  CachingAllocator allocator(backend, AllocatorOptions());
  allocator.AddObserver(log.get());
  std::mt19937_64 rng(7);
  std::vector<DevicePtr> persistent;
  for (uint64_t i = 0; i < 64; ++i) persistent.push_back(*allocator.Allocate((64 + i) * kMiB, 0));
  uint64_t now = 0;
  std::vector<DevicePtr> saved;
  for (uint64_t step = 0; log->events() < events; ++step) {
    log->Mark(absl::StrFormat("step %d / forward", step), now);
    const uint64_t seq = 256 + 128 * (rng() % 8);
    for (int layer = 0; layer < 48 && log->events() < events; ++layer) {
      for (int t = 0; t < 6; ++t) {
        log->set_time_ns(now += 500);
        saved.push_back(*allocator.Allocate(seq * (4096 + 1024 * static_cast<uint64_t>(t)), 0));
      }
      for (int t = 0; t < 8; ++t) {  // short-lived temporaries, many small
        log->set_time_ns(now += 500);
        DevicePtr p = *allocator.Allocate(512 + rng() % (256 * 1024), 0);
        log->set_time_ns(now += 500);
        (void)allocator.Free(p);
      }
    }
    log->Mark(absl::StrFormat("step %d / backward", step), now);
    while (!saved.empty()) {
      log->set_time_ns(now += 500);
      (void)allocator.Free(saved.back());
      saved.pop_back();
    }
  }
  allocator.RemoveObserver(log.get());
  const uint64_t written = log->events();
  (void)log->Close();
  return written;
}

// The shared log of the benchmarks, written on first use.
const std::string& SyntheticLog(uint64_t* events) {
  static uint64_t count = 0;
  static const std::string path = [] {
    const std::string p = (std::filesystem::temp_directory_path() /
                           absl::StrFormat("fragscope-bench-%d.fslog", getpid()))
                              .string();
    count = WriteSyntheticLog(p, 10'000'000);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove(std::filesystem::temp_directory_path() /
                                  absl::StrFormat("fragscope-bench-%d.fslog", getpid()),
                              ec);
    });
    return p;
  }();
  *events = count;
  return path;
}

ReplayConfig Config() {
  ReplayConfig config;
  config.capacity_bytes = kCapacityBytes;
  return config;
}

// Replays `source` under Config() with no observer; the events it read.
uint64_t ReplayAlone(TraceSource& source) {
  Replayer replayer(source, Config());
  (void)replayer.Init();
  (void)replayer.Run(nullptr);
  return replayer.events_read();
}

void BM_ReplayFslog(benchmark::State& state) {
  uint64_t log_events = 0;
  const std::string& path = SyntheticLog(&log_events);
  uint64_t events = 0;
  for (auto _ : state) {
    absl::StatusOr<TraceOpener> opener = TraceOpener::Create(path);
    events += ReplayAlone(**opener->Open());
  }
  state.SetItemsProcessed(static_cast<int64_t>(events));
  state.counters["events"] = static_cast<double>(log_events);
}
BENCHMARK(BM_ReplayFslog)->Unit(benchmark::kMillisecond)->UseRealTime();

// The same with the log read and decoded on the replay's own thread (as each replay of a sweep
// that fills the cores does; Note [Reading on a background thread] in
// analysis/sources/fslog_source.h), where BM_ReplayFslog uses a background reader when a core is
// free for it.
void BM_ReplayFslogCallingThread(benchmark::State& state) {
  uint64_t log_events = 0;
  const std::string& path = SyntheticLog(&log_events);
  uint64_t events = 0;
  for (auto _ : state) {
    events += ReplayAlone(**FslogSource::Open(path, FslogReading::kCallingThread));
  }
  state.SetItemsProcessed(static_cast<int64_t>(events));
}
BENCHMARK(BM_ReplayFslogCallingThread)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_ReplayWithMetrics(benchmark::State& state) {
  uint64_t log_events = 0;
  const std::string& path = SyntheticLog(&log_events);
  uint64_t events = 0;
  for (auto _ : state) {
    absl::StatusOr<TraceOpener> opener = TraceOpener::Create(path);
    std::unique_ptr<TraceSource> source = *opener->Open();
    Replayer replayer(*source, Config());
    (void)replayer.Init();
    MetricsCollector metrics(replayer);
    OomCollector ooms(replayer, {.capacity_bytes = Config().capacity_bytes});
    HookList hooks;
    hooks.Add(&metrics);
    hooks.Add(&ooms);
    (void)replayer.Run(&hooks);
    events += replayer.events_read();
  }
  state.SetItemsProcessed(static_cast<int64_t>(events));
}
BENCHMARK(BM_ReplayWithMetrics)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Sweep(benchmark::State& state) {
  uint64_t log_events = 0;
  const std::string& path = SyntheticLog(&log_events);
  absl::StatusOr<TraceOpener> opener = TraceOpener::Create(path);
  const std::vector<SweepConfig> configs = *BuildSweepConfigs(AllocatorOptions(), SweepSpec());
  uint64_t events = 0;
  for (auto _ : state) {
    std::vector<SweepResult> results = RunSweep(*opener, configs, {kCapacityBytes, std::nullopt},
                                                static_cast<int>(state.range(0)));
    benchmark::DoNotOptimize(results);
    events += log_events * configs.size();
  }
  state.SetItemsProcessed(static_cast<int64_t>(events));
  state.counters["configs"] = static_cast<double>(configs.size());
}
BENCHMARK(BM_Sweep)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace fragscope

int main(int argc, char** argv) {
  std::string path;
  uint64_t events = 100'000'000;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--write_synthetic_log=", 22) == 0) path = argv[i] + 22;
    if (std::strncmp(argv[i], "--events=", 9) == 0)
      events = std::strtoull(argv[i] + 9, nullptr, 10);
  }
  if (!path.empty()) {
    const uint64_t written = fragscope::WriteSyntheticLog(path, events);
    std::cout << path << ": " << written << " events\n";
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
