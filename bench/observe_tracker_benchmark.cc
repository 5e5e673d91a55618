// What each of PyTorch's allocator trace entries costs on the CPU, by who receives it, with no
// GPU: PyTorch 2.11's record_trace (c10/cuda/CUDACachingAllocator.cpp) builds a compile-context
// string and a TraceEntry, calls every attached tracker, and with memory history on copies the
// entry into its ring buffer under the ring's lock. Timed here with LibTorch's own TraceEntry:
//
//   BM_Trace/empty    a tracker that does nothing: what PyTorch spends on a tracker at all
//   BM_Trace/history  no tracker, the entry copied into a 100,000-entry ring under a mutex, as
//                     _record_memory_history(context=None) does
//   BM_Trace/observe  fragscope's observe callback (hooks/torch_trace_observer.h) writing a real
//                     .fslog in /tmp
//
// and, to show where observe's share goes, its two parts called from a plain tracker:
//
//   sink 3            the converter alone (hooks/native_trace_converter.h: the block size rounded
//                     as PyTorch rounds it, the event's fields)
//   sink 4            the converter and the .fslog writer's OnEvent, without TraceObserver's
//                     dispatch (device, action, pool id, the log's lookup)
//
// for two streams of entries: warm pairs (alloc, free_requested, free_completed of one block) and
// a random mix (blocks spread over 4096 known segments, freed in random order). ns per event is
// the time per iteration / 3 (one iteration is one alloc and its two free entries). The GPU
// figure of the same comparison is bench/gpu_history_overhead's; this one shows where the
// callback's share goes without a device, and on the GPU machine's host it isolates the CPU side.
//
//   build/bench/observe_tracker_benchmark --benchmark_min_time=0.5 --benchmark_repetitions=5
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/ApproximateClock.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "fslog/fslog_writer.h"
#include "hooks/native_trace_converter.h"
#include "hooks/torch_observer.h"
#include "hooks/torch_trace_observer.h"

namespace fragscope {
namespace {

using c10::CachingDeviceAllocator::TraceEntry;

constexpr uint64_t kBase = 0x7f0000000000;
constexpr uint64_t kSegmentBytes = 20 << 20;
constexpr uint64_t kSegments = 4096;
constexpr uint64_t kDeviceBytes = uint64_t{80} << 30;

// The log header of the benchmark's device.
FslogHeaderInfo BenchmarkHeader() {
  FslogHeaderInfo header;
  header.device_name = "benchmark";
  header.device_total_bytes = kDeviceBytes;
  return header;
}

// PyTorch's RingBuffer<TraceEntry>::insertEntries.
class HistoryRing {
 public:
  explicit HistoryRing(size_t max_entries) : max_(max_entries) { entries_.reserve(max_entries); }
  void Insert(const TraceEntry& entry) {
    std::lock_guard<std::mutex> lock(mu_);
    if (entries_.size() < max_) {
      entries_.emplace_back(entry);
    } else {
      entries_[next_++] = entry;
      if (next_ == max_) next_ = 0;
    }
  }

 private:
  std::mutex mu_;
  size_t max_;
  size_t next_ = 0;
  std::vector<TraceEntry> entries_;
};

// PyTorch's record_trace with record_history and trace_trackers_ as given.
struct Recorder {
  std::vector<std::function<void(const TraceEntry&)>> trackers;
  HistoryRing* history = nullptr;

  void Record(TraceEntry::Action action, uint64_t addr, uint64_t size) {
    std::string compile_string = "N/A";
    auto entry = TraceEntry(action, 0, addr, size, reinterpret_cast<void*>(7), {0, 0},
                            c10::getApproximateTime(), nullptr, compile_string);
    for (const auto& tracker : trackers) tracker(entry);
    if (history != nullptr) history->Insert(entry);
  }
};

struct Block {
  uint64_t addr;
  uint64_t size;
};

// Blocks in the random mix: a 512 B - 1 MiB size in a random one of kSegments segments.
std::vector<Block> RandomBlocks(size_t n) {
  std::mt19937_64 rng(42);
  std::vector<Block> blocks(n);
  for (Block& b : blocks) {
    const uint64_t segment = kBase + (rng() % kSegments) * kSegmentBytes;
    b.size = 512 + rng() % (1 << 20);
    b.addr = segment + (rng() % (kSegmentBytes - b.size)) / 512 * 512;
  }
  return blocks;
}

// The converter's view of an entry, as TraceObserver makes it.
hooks::NativeTraceEntry NativeOf(const TraceEntry& entry) {
  return {torch_hooks::NativeActionOf(entry.action_), entry.device_, entry.addr_, entry.size_,
          reinterpret_cast<uint64_t>(entry.stream_)};
}

// range(0): 0 empty tracker, 1 history, 2 observe, 3 the converter, 4 converter + writer, 5
// observe with a module context set on the thread (every alloc record names it: Note [Context
// records]); range(1): 0 warm pair, 1 random mix.
void BM_Trace(benchmark::State& state) {
  const int sink = static_cast<int>(state.range(0));
  const bool random = state.range(1) == 1;
  Recorder recorder;
  HistoryRing ring(100'000);
  const std::string path = "/tmp/fragscope_bench_observe_" + std::to_string(getpid()) + ".fslog";
  std::unique_ptr<torch_hooks::TraceObserver> observer;
  if (sink == 0) recorder.trackers.emplace_back([](const TraceEntry&) {});
  if (sink == 1) recorder.history = &ring;
  if (sink == 2 || sink == 5) {
    observer = std::make_unique<torch_hooks::TraceObserver>(path, FslogWriterOptions{},
                                                            AllocatorOptions{}, nullptr);
    observer->AddDevice(0, BenchmarkHeader(), 1.0);
    if (sink == 5) {
      // Through the library's C API: its writers read the library's own thread context.
      torch_hooks::ObserveSetContext(
          observer->DefineContext(6, "model.layers.0.mlp", "", "", false));
    }
    torch_hooks::TraceObserver* raw = observer.get();
    recorder.trackers.emplace_back([raw](const TraceEntry& entry) { raw->OnTrace(entry); });
    // The segments are known to the converter, as in a job observed from its start.
    for (uint64_t s = 0; s < kSegments; ++s) {
      recorder.Record(TraceEntry::SEGMENT_ALLOC, kBase + s * kSegmentBytes, kSegmentBytes);
    }
  }
  hooks::NativeTraceConverter converter(AllocatorOptions{}, kDeviceBytes);
  AllocatorEvent event;
  std::unique_ptr<FslogWriter> writer;
  if (sink == 3) {
    recorder.trackers.emplace_back([&](const TraceEntry& entry) {
      converter.Convert(NativeOf(entry), &event);
      benchmark::DoNotOptimize(event);
    });
  }
  if (sink == 4) {
    absl::StatusOr<std::unique_ptr<FslogWriter>> opened =
        FslogWriter::Open(path, BenchmarkHeader());
    if (!opened.ok()) {
      state.SkipWithError(std::string(opened.status().message()).c_str());
      return;
    }
    writer = std::move(*opened);
    recorder.trackers.emplace_back([&](const TraceEntry& entry) {
      if (converter.Convert(NativeOf(entry), &event)) writer->OnEvent(event);
    });
  }
  const std::vector<Block> blocks = RandomBlocks(random ? 1 << 16 : 1);
  // The random mix frees each block some hundred entries after its allocation.
  constexpr size_t kLag = 256;
  size_t i = 0;
  for (auto _ : state) {
    const Block& a = blocks[i % blocks.size()];
    const Block& f = blocks[(i + blocks.size() - (random ? kLag : 0)) % blocks.size()];
    recorder.Record(TraceEntry::ALLOC, a.addr, a.size);
    recorder.Record(TraceEntry::FREE_REQUESTED, f.addr, f.size);
    recorder.Record(TraceEntry::FREE_COMPLETED, f.addr, f.size);
    ++i;
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * 3);
  state.counters["ns_per_event"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 3,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  torch_hooks::ObserveSetContext(0);
  observer.reset();
  writer.reset();
  std::remove(path.c_str());
}
BENCHMARK(BM_Trace)->ArgNames({"sink", "random"})->ArgsProduct({{0, 1, 2, 3, 4, 5}, {0, 1}});

}  // namespace
}  // namespace fragscope

BENCHMARK_MAIN();
