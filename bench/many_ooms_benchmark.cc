// `fragscope analyze`'s work on a log with very many OOMs over very many segments (bench/README.md,
// "Hostile inputs"; Note [A layout kept current] in analysis/explain/live_layout.h):
//
//   BM_AnalyzeManyOoms/N  AnalyzeTrace without the sweep (the replay, metrics, OOM explanations,
//                         verdict) of a log of N segments, each 12 MiB with one live 10.5 MiB
//                         block and a 1.5 MiB hole, filling the device, then N allocations of
//                         10.5 MiB that each run out of memory: every OOM sees N fragmented
//                         segments. Time per analysis; linear in N.
//
// The log is written once per N, by fragscope's allocator, into the temporary directory. Also
// writes it for timing the command (bench/RESULTS.md, "Hostile inputs"):
//   many_ooms_benchmark --write_log=PATH --segments=N
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "analysis/analyzer.h"
#include "analysis/report/fslog_file_writer.h"
#include "analysis/sources/open_trace.h"
#include "benchmark/benchmark.h"

namespace fragscope {
namespace {

constexpr uint64_t kRequest = 10 * kMiB + kMiB / 2;  // a 12 MiB segment, 1.5 MiB split off
constexpr uint64_t kSegmentBytes = 12 * kMiB;

// Writes the log of `segments` segments and as many OOMs to `path`.
void WriteManyOomsLog(const std::string& path, uint64_t segments) {
  FslogHeader header;
  header.device_total_bytes = segments * kSegmentBytes;
  header.device_name = "simulated device filled with fragmented segments";
  header.start_monotonic_ns = 1'000'000'000;
  std::unique_ptr<FslogFileWriter> log = *FslogFileWriter::Open(path, header);
  SimulatedBackend backend(header.device_total_bytes);
  CachingAllocator allocator(backend, AllocatorOptions());
  allocator.AddObserver(log.get());
  uint64_t now = 0;
  for (uint64_t i = 0; i < segments; ++i) {
    log->set_time_ns(now += 1000);
    (void)allocator.Allocate(kRequest, 0);
  }
  for (uint64_t i = 0; i < segments; ++i) {
    log->set_time_ns(now += 1000);
    (void)allocator.Allocate(kRequest, 0);  // out of memory
  }
  allocator.RemoveObserver(log.get());
  (void)log->Close();
}

// The log of `segments`, written on first use and removed at exit.
const std::string& ManyOomsLog(uint64_t segments) {
  static std::map<uint64_t, std::string> paths;
  static struct Cleanup {
    ~Cleanup() {
      std::error_code ec;
      for (const auto& [n, path] : paths) std::filesystem::remove(path, ec);
    }
  } cleanup;
  auto [it, inserted] = paths.try_emplace(segments);
  if (inserted) {
    it->second = (std::filesystem::temp_directory_path() /
                  absl::StrFormat("fragscope-many-ooms-%d-%d.fslog", getpid(), segments))
                     .string();
    WriteManyOomsLog(it->second, segments);
  }
  return it->second;
}

void BM_AnalyzeManyOoms(benchmark::State& state) {
  const uint64_t segments = static_cast<uint64_t>(state.range(0));
  const std::string& path = ManyOomsLog(segments);
  AnalysisOptions options;
  options.run_sweep = false;
  uint64_t ooms = 0;
  for (auto _ : state) {
    absl::StatusOr<TraceOpener> opener = TraceOpener::Create(path);
    if (!opener.ok()) {
      state.SkipWithError(std::string(opener.status().message()).c_str());
      return;
    }
    absl::StatusOr<RankReport> report = AnalyzeTrace(*opener, options);
    if (!report.ok()) {
      state.SkipWithError(std::string(report.status().message()).c_str());
      return;
    }
    ooms = report->oom_count;
    benchmark::DoNotOptimize(report);
  }
  state.counters["ooms"] = static_cast<double>(ooms);
  state.counters["segments"] = static_cast<double>(segments);
}
BENCHMARK(BM_AnalyzeManyOoms)
    ->Arg(10'000)
    ->Arg(100'000)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(1);

}  // namespace
}  // namespace fragscope

int main(int argc, char** argv) {
  std::string path;
  uint64_t segments = 100'000;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--write_log=", 12) == 0) path = argv[i] + 12;
    if (std::strncmp(argv[i], "--segments=", 11) == 0) {
      segments = std::strtoull(argv[i] + 11, nullptr, 10);
    }
  }
  if (!path.empty()) {
    fragscope::WriteManyOomsLog(path, segments);
    std::cout << path << ": " << segments << " segments, " << segments << " OOMs\n";
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
