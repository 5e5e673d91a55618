// Event-log costs: FslogWriter::OnEvent per event (amortized, background writer active,
// writing to a file in /tmp; with and without compressed chunks) and FslogReader throughput
// over a ~200 MB log (plain, and with compressed chunks).
//
//   build/bench/fslog_benchmark --benchmark_min_time=1 --benchmark_repetitions=3
//
// BM_OnEventBurst is the headline figure: bursts of 4096 events are timed (hand-offs to the
// background thread and its wake-ups included); between bursts, untimed, the writer catches up,
// so no record is dropped. ns_per_event is the mean over all bursts; cpu_ns_per_event the mean of
// the calling thread's CPU time, p50_ns_per_event the median burst and min_ns_per_event the
// fastest: those three are robust against the preemptions of a shared virtual machine, which the
// mean is not. BM_OnEventSustained never pauses: when the disk is slower
// than the event rate the writer drops records (counted), which is what a real job would see.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "fslog/crc32c.h"
#include "fslog/fslog_reader.h"
#include "fslog/fslog_writer.h"
#include "fslog/fslog_zstd.h"
#include "hooks/native_trace_converter.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace fragscope {
namespace {

std::string BenchPath(const char* name) {
  return std::string("/tmp/fragscope_bench_") + name + "_" + std::to_string(getpid()) + ".fslog";
}

FslogHeaderInfo Info() {
  FslogHeaderInfo info;
  info.device_name = "benchmark";
  info.device_total_bytes = uint64_t{80} << 30;
  return info;
}

AllocatorEvent Event(uint64_t i) {
  AllocatorEvent event;
  event.kind = (i & 1) ? EventKind::kFreeCompleted : EventKind::kAlloc;
  event.pool = PoolKind::kLarge;
  event.ptr = 0x7f0000000000 + (i << 12);
  event.bytes = 2 << 20;
  event.requested_bytes = 2000000;
  event.segment = 0x7f0000000000;
  event.split_bytes = i & 0xFFFF;
  return event;
}

constexpr int kBurst = 4096;

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The events of one burst, built once so that the timed loops only call OnEvent.
const std::vector<AllocatorEvent>& BurstEvents() {
  static const std::vector<AllocatorEvent> events = [] {
    std::vector<AllocatorEvent> v;
    for (int i = 0; i < kBurst; ++i) v.push_back(Event(static_cast<uint64_t>(i)));
    return v;
  }();
  return events;
}

// Baseline: the same burst loop calling an observer that does nothing.
class NullObserver : public AllocatorObserver {
 public:
  void OnEvent(const AllocatorEvent& event) override { benchmark::DoNotOptimize(&event); }
};

void BM_NullObserverBurst(benchmark::State& state) {
  NullObserver null;
  AllocatorObserver* observer = &null;
  benchmark::DoNotOptimize(observer);
  const std::vector<AllocatorEvent>& events = BurstEvents();
  for (auto _ : state) {
    for (const AllocatorEvent& event : events) observer->OnEvent(event);
  }
  // CPU seconds per event, shown in ns.
  state.counters["per_event"] = benchmark::Counter(
      kBurst, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_NullObserverBurst);

// Bursts timed one by one: wall time (the benchmark's manual time) and the calling thread's CPU
// time, reported per event.
class BurstTimes {
 public:
  template <typename Burst>
  void Time(benchmark::State& state, Burst burst) {
    const double cpu_start = ThreadCpuSeconds();
    const auto start = std::chrono::steady_clock::now();
    burst();
    const auto stop = std::chrono::steady_clock::now();
    cpu_seconds_ += ThreadCpuSeconds() - cpu_start;
    const double seconds = std::chrono::duration<double>(stop - start).count();
    state.SetIterationTime(seconds);
    bursts_.push_back(seconds);
  }

  // The counters, for bursts of `events` events each, and the writer's dropped records.
  void Report(benchmark::State& state, double events, const FslogWriter& writer) {
    if (bursts_.empty()) return;
    const double all = events * static_cast<double>(bursts_.size());
    double timed_seconds = 0;
    for (double seconds : bursts_) timed_seconds += seconds;
    // (items_per_second would divide by CPU time, which includes the untimed flushes.)
    state.counters["ns_per_event"] = timed_seconds * 1e9 / all;
    // The calling thread's CPU time in the bursts: what the mean would be without preemptions.
    state.counters["cpu_ns_per_event"] = cpu_seconds_ * 1e9 / all;
    // The median burst: robust against the preemptions of a shared (virtual) machine.
    const auto middle = bursts_.begin() + static_cast<std::ptrdiff_t>(bursts_.size() / 2);
    std::nth_element(bursts_.begin(), middle, bursts_.end());
    state.counters["p50_ns_per_event"] = *middle * 1e9 / events;
    state.counters["min_ns_per_event"] =
        *std::min_element(bursts_.begin(), bursts_.end()) * 1e9 / events;
    state.counters["dropped"] = static_cast<double>(writer.dropped_records());
  }

 private:
  std::vector<double> bursts_;
  double cpu_seconds_ = 0;
};

// range(0): 1 = TSC clock allowed (the default), 0 = clock_gettime.
// range(1): 1 = coarse timestamps (the default: most records take the background thread's
// published time), 0 = every record reads the clock.
// range(2): the zstd level the background thread compresses chunks at (0: none, the default).
void BM_OnEventBurst(benchmark::State& state) {
  const std::vector<AllocatorEvent>& events = BurstEvents();
  const std::string path = BenchPath("burst");
  auto writer = FslogWriter::Open(path, Info(),
                                  {.buffer_count = 8,
                                   .allow_tsc_clock = state.range(0) != 0,
                                   .coarse_timestamps = state.range(1) != 0,
                                   .zstd_level = static_cast<int>(state.range(2))})
                    .value();
  AllocatorObserver* observer = writer.get();
  BurstTimes times;
  for (auto _ : state) {
    times.Time(state, [&] {
      for (const AllocatorEvent& event : events) observer->OnEvent(event);
    });
    writer->Flush().IgnoreError();  // untimed: let the background writer catch up
  }
  times.Report(state, kBurst, *writer);
  state.SetLabel(
      absl::StrCat(writer->header().clock == FslogClock::kTscCalibrated ? "tsc" : "clock_gettime",
                   state.range(1) != 0 ? ", coarse" : ", every record",
                   state.range(2) != 0 ? absl::StrCat(", zstd ", state.range(2)) : ""));
  writer.reset();
  std::remove(path.c_str());
}
BENCHMARK(BM_OnEventBurst)
    ->ArgNames({"tsc", "coarse", "zstd"})
    ->Args({1, 1, 0})
    ->Args({1, 0, 0})
    ->Args({0, 1, 0})
    ->Args({0, 0, 0})
    ->Args({1, 1, 1})
    ->Args({1, 1, 3})
    ->UseManualTime();

// The observe mode's own path (hooks/torch_observer.cc OnTrace, without LibTorch): PyTorch's
// trace entries of a warm pair (alloc, free_requested, free_completed of one 1 MiB block) turned
// into AllocatorEvents by the NativeTraceConverter and handed to the writer, in bursts as above.
// What fragscope adds per event to PyTorch's allocator in observe mode, less PyTorch's own cost of
// building the TraceEntry and calling the tracker (bench/gpu_history_overhead measures the whole).
void BM_ObservedNativePairBurst(benchmark::State& state) {
  constexpr int kPairs = kBurst / 3;
  const std::string path = BenchPath("observed");
  auto writer = FslogWriter::Open(path, Info()).value();
  hooks::NativeTraceConverter converter(AllocatorOptions{}, uint64_t{80} << 30);
  hooks::NativeTraceEntry segment{hooks::NativeTraceAction::kSegmentAlloc, 0, 0x7f0000000000,
                                  20 << 20, 7};
  AllocatorEvent event;
  converter.Convert(segment, &event);
  writer->OnEvent(event);
  BurstTimes times;
  for (auto _ : state) {
    times.Time(state, [&] {
      for (int i = 0; i < kPairs; ++i) {
        for (hooks::NativeTraceAction action :
             {hooks::NativeTraceAction::kAlloc, hooks::NativeTraceAction::kFreeRequested,
              hooks::NativeTraceAction::kFreeCompleted}) {
          const hooks::NativeTraceEntry entry{action, 0, 0x7f0000000000, 1 << 20, 7};
          if (converter.Convert(entry, &event)) writer->OnEvent(event);
        }
      }
    });
    writer->Flush().IgnoreError();  // untimed: let the background writer catch up
  }
  times.Report(state, 3.0 * kPairs, *writer);
  writer.reset();
  std::remove(path.c_str());
}
BENCHMARK(BM_ObservedNativePairBurst)->UseManualTime();

// range(0): the zstd level (0: none). Compressed, the background thread must compress as fast as
// events come, or records are dropped (dropped_pct).
void BM_OnEventSustained(benchmark::State& state) {
  const std::string path = BenchPath("sustained");
  auto writer =
      FslogWriter::Open(path, Info(), {.zstd_level = static_cast<int>(state.range(0))}).value();
  AllocatorObserver* observer = writer.get();
  const std::vector<AllocatorEvent>& events = BurstEvents();
  uint64_t i = 0;
  for (auto _ : state) observer->OnEvent(events[i++ % kBurst]);
  state.SetItemsProcessed(state.iterations());
  state.counters["dropped_pct"] =
      100.0 * static_cast<double>(writer->dropped_records()) / static_cast<double>(i);
  writer.reset();
  std::remove(path.c_str());
}
BENCHMARK(BM_OnEventSustained)->ArgName("zstd")->Arg(0)->Arg(1)->Arg(3)->Iterations(20'000'000);

// What the background thread spends per chunk with compression on: one full 64 KiB chunk of
// records (the burst's events, encoded) compressed at level range(0). items: records.
void BM_CompressChunk(benchmark::State& state) {
  std::vector<char> chunk(kMaxChunkBytes);
  auto* records = reinterpret_cast<LogRecord*>(chunk.data() + kChunkHeaderBytes);
  for (size_t i = 0; i < kMaxChunkRecords; ++i) {
    EncodeEvent(BurstEvents()[i % kBurst], 1'000'000'000 + 20 * i, &records[i]);
  }
  SealChunk(kMaxChunkRecords, 0, records, reinterpret_cast<ChunkHeader*>(chunk.data()));
  auto compressor = internal::ZstdChunkCompressor::Create(static_cast<int>(state.range(0))).value();
  size_t frame = 0;
  for (auto _ : state) {
    frame = compressor->Compress(chunk.data(), chunk.size()).value().size();
    benchmark::DoNotOptimize(frame);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(kMaxChunkRecords));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(chunk.size()));
  state.counters["ratio"] = static_cast<double>(chunk.size()) / static_cast<double>(frame);
}
BENCHMARK(BM_CompressChunk)->ArgName("zstd")->Arg(1)->Arg(3);

void BM_ClockGettime(benchmark::State& state) {
  timespec ts;
  for (auto _ : state) {
    clock_gettime(CLOCK_MONOTONIC, &ts);
    benchmark::DoNotOptimize(ts);
  }
}
BENCHMARK(BM_ClockGettime);

#if defined(__x86_64__)
void BM_Rdtsc(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(__rdtsc());
}
BENCHMARK(BM_Rdtsc);
#endif

// range(0): 1 = hardware (if available), 0 = table.
void BM_Crc32c64KiB(benchmark::State& state) {
  std::string data(64 * 1024, 'x');
  const bool hardware = state.range(0) != 0 && Crc32cHardwareAvailable();
  for (auto _ : state) {
    benchmark::DoNotOptimize(hardware ? Crc32cExtendHardware(0, data.data(), data.size())
                                      : Crc32cExtendSoftware(0, data.data(), data.size()));
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(data.size()));
  state.SetLabel(hardware ? "sse4.2" : "table");
}
BENCHMARK(BM_Crc32c64KiB)->Arg(1)->Arg(0);

// The ~200 MB log the reader benchmarks share, written once (complete: block_when_full); its
// chunks compressed at `zstd_level` unless 0.
std::string WriteReaderLog(const char* name, int zstd_level) {
  const std::string p = BenchPath(name);
  auto writer =
      FslogWriter::Open(p, Info(), {.block_when_full = true, .zstd_level = zstd_level}).value();
  constexpr uint64_t kRecords = 200'000'000 / kRecordBytes;
  for (uint64_t i = 0; i < kRecords; ++i) {
    if (i % 100'000 == 0) writer->Mark("step");
    writer->OnEvent(Event(i));
  }
  return p;
}

const std::string& ReaderLog() {
  static const std::string path = WriteReaderLog("reader", /*zstd_level=*/0);
  return path;
}

int64_t FileBytes(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  std::fseek(f, 0, SEEK_END);
  const long size = std::ftell(f);
  std::fclose(f);
  return size;
}

// Logical records through Next(): decode every event.
void BM_ReaderNext(benchmark::State& state) {
  const std::string& path = ReaderLog();
  uint64_t records = 0;
  for (auto _ : state) {
    auto reader = FslogReader::Open(path).value();
    LogEntry entry;
    uint64_t bytes = 0;
    while (reader.Next(&entry).value()) {
      bytes += entry.event().bytes;
      ++records;
    }
    benchmark::DoNotOptimize(bytes);
  }
  state.SetBytesProcessed(state.iterations() * FileBytes(path));
  state.SetItemsProcessed(static_cast<int64_t>(records));
}
BENCHMARK(BM_ReaderNext)->Unit(benchmark::kMillisecond);

// Every chunk of the log at `path` through NextChunk(), its records read in place. Returns the
// records read.
uint64_t ReadChunks(const std::string& path) {
  auto reader = FslogReader::Open(path).value();
  uint64_t bytes = 0;
  uint64_t records = 0;
  for (;;) {
    auto chunk = reader.NextChunk().value();
    if (chunk.empty()) break;
    records += chunk.size();
    for (const LogRecord& record : chunk) bytes += record.words[kWordBytes];
  }
  benchmark::DoNotOptimize(bytes);
  return records;
}

// Raw chunks through NextChunk(): CRC-checked, records read in place.
void BM_ReaderChunks(benchmark::State& state) {
  const std::string& path = ReaderLog();
  for (auto _ : state) ReadChunks(path);
  state.SetBytesProcessed(state.iterations() * FileBytes(path));
}
BENCHMARK(BM_ReaderChunks)->Unit(benchmark::kMillisecond);

// The same records written with compressed chunks (zstd level 3), read through NextChunk():
// each chunk decompressed, then CRC-checked. Bytes are the compressed file's.
void BM_ReaderChunksZstd(benchmark::State& state) {
  static const std::string path = WriteReaderLog("reader_zstd", /*zstd_level=*/3);
  uint64_t records = 0;
  for (auto _ : state) records += ReadChunks(path);
  state.SetBytesProcessed(state.iterations() * FileBytes(path));
  state.SetItemsProcessed(static_cast<int64_t>(records));
}
BENCHMARK(BM_ReaderChunksZstd)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace fragscope

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::remove(fragscope::BenchPath("reader").c_str());
  std::remove(fragscope::BenchPath("reader_zstd").c_str());
  return 0;
}
