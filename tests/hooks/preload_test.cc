// A CUDA program (linked against the stub runtime, stub_cudart.cc) run by ctest once plainly and
// once per FRAGSCOPE_PRELOAD_MODE under LD_PRELOAD=libfragscope_preload.so. Each test checks what
// the mode in the environment promises: interception, pass-through, caching, logging, and that
// nothing breaks at exit.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "analysis/sources/fslog_source.h"
#include "fslog/allocation_role.h"
#include "fslog/fslog_reader.h"
#include "gtest/gtest.h"
#include "tests/fslog/fslog_test_util.h"
#include "tests/hooks/stub_cudart.h"

namespace fragscope {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

// "none" when the interposer is not preloaded, else FRAGSCOPE_PRELOAD_MODE.
std::string ExpectedMode() {
  if (Env("LD_PRELOAD").find("libfragscope_preload") == std::string::npos) return "none";
  const std::string mode = Env("FRAGSCOPE_PRELOAD_MODE");
  return mode.empty() ? "observe" : mode;
}

template <typename Fn>
Fn Preloaded(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

StubCudartCounters Counters() {
  StubCudartCounters counters;
  stub_cudart_counters(&counters);
  return counters;
}

void* Stream(uintptr_t id) { return reinterpret_cast<void*>(id); }

std::vector<LogEntry> ReadLog(int device) {
  std::string path = absl::StrReplaceAll(
      Env("FRAGSCOPE_LOG"), {{"%p", absl::StrCat(getpid())}, {"%d", absl::StrCat(device)}});
  testing::ReadResult result = testing::ReadFile(path);
  EXPECT_TRUE(result.status.ok()) << result.status;
  return result.entries;
}

TEST(PreloadTest, InterposerIsPresentExactlyWhenPreloaded) {
  using ModeFn = const char* (*)();
  auto mode = Preloaded<ModeFn>("fragscope_preload_mode");
  if (ExpectedMode() == "none") {
    EXPECT_EQ(mode, nullptr);
    return;
  }
  ASSERT_NE(mode, nullptr);
  EXPECT_EQ(std::string(mode()), ExpectedMode());
  // The program's own reference to cudaMalloc (versioned libcudart.so.13) binds to the interposer.
  void* ours = dlsym(RTLD_DEFAULT, "cudaMalloc");
  Dl_info info;
  ASSERT_NE(dladdr(ours, &info), 0);
  EXPECT_NE(std::string(info.dli_fname).find("libfragscope_preload"), std::string::npos)
      << info.dli_fname;
}

TEST(PreloadTest, PassThroughKeepsTheRuntimesBehaviour) {
  if (ExpectedMode() == "cache") GTEST_SKIP() << "cache mode serves allocations itself";
  const StubCudartCounters before = Counters();
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 3 * kMiB), 0);
  ASSERT_NE(p, nullptr);
  std::memset(p, 0xab, 3 * kMiB);  // real (host) memory from the stub
  void* q = nullptr;
  ASSERT_EQ(cudaMallocAsync(&q, 5000, Stream(7)), 0);
  ASSERT_EQ(cudaFreeAsync(q, Stream(7)), 0);
  ASSERT_EQ(cudaFree(p), 0);
  EXPECT_EQ(cudaFree(reinterpret_cast<void*>(0x1234)), 1) << "errors pass through unchanged";
  cudaGetLastError();
  const StubCudartCounters after = Counters();
  EXPECT_EQ(after.malloc_calls - before.malloc_calls, 2);
  EXPECT_EQ(after.malloc_async_calls - before.malloc_async_calls, 1);
  EXPECT_EQ(after.free_calls - before.free_calls, 3);
  EXPECT_EQ(after.live_bytes, before.live_bytes);
}

TEST(PreloadTest, ObserveModeLogsSegmentCallsPerDevice) {
  if (ExpectedMode() != "observe") GTEST_SKIP() << "observe mode only";
  using MarkFn = void (*)(const char*);
  using FlushFn = int (*)();
  void *a = nullptr, *b = nullptr, *c = nullptr, *huge = nullptr;
  ASSERT_EQ(cudaSetDevice(0), 0);
  ASSERT_EQ(cudaMalloc(&a, 2 * kMiB), 0);
  Preloaded<MarkFn>("fragscope_preload_mark")("step 1 / forward");
  // Inside the stub, cudaMallocAsync calls cudaMalloc again: the guard must log it once.
  ASSERT_EQ(cudaMallocAsync(&b, 20 * kMiB, Stream(9)), 0);
  EXPECT_EQ(cudaMalloc(&huge, size_t{1} << 40), 2) << "cudaErrorMemoryAllocation";
  cudaGetLastError();
  ASSERT_EQ(cudaSetDevice(1), 0);
  ASSERT_EQ(cudaMalloc(&c, 1000), 0);
  ASSERT_EQ(cudaFree(c), 0);
  ASSERT_EQ(cudaSetDevice(0), 0);
  ASSERT_EQ(cudaFreeAsync(b, Stream(9)), 0);
  ASSERT_EQ(cudaFree(a), 0);
  ASSERT_EQ(Preloaded<FlushFn>("fragscope_preload_flush")(), 0);

  // Earlier tests of this process are in the log too: count from the marker on.
  std::map<EventKind, int> kinds;
  bool after_marker = false;
  uint64_t last_alloc_before_marker = 0;
  for (const LogEntry& e : ReadLog(0)) {
    if (e.kind() == EventKind::kMarker) {
      EXPECT_EQ(e.text, "step 1 / forward");
      after_marker = true;
      continue;
    }
    if (!after_marker) {
      if (e.kind() == EventKind::kSegmentAlloc) last_alloc_before_marker = e.event().ptr;
      continue;
    }
    ++kinds[e.kind()];
    if (e.kind() == EventKind::kSegmentAlloc) {
      EXPECT_EQ(e.event().ptr, reinterpret_cast<uint64_t>(b));
      EXPECT_EQ(e.event().bytes, 20 * kMiB);
      EXPECT_EQ(e.event().stream, 9u);
      EXPECT_EQ(e.event().pool, PoolKind::kLarge);
    }
    if (e.kind() == EventKind::kOom) {
      EXPECT_EQ(e.event().bytes, size_t{1} << 40);
      EXPECT_EQ(e.event().device_total_bytes, 256 * kMiB);
    }
  }
  EXPECT_TRUE(after_marker);
  EXPECT_EQ(last_alloc_before_marker, reinterpret_cast<uint64_t>(a));
  EXPECT_EQ(kinds[EventKind::kSegmentAlloc], 1) << "b only once: the re-entrancy guard";
  EXPECT_EQ(kinds[EventKind::kSegmentFree], 2);
  EXPECT_EQ(kinds[EventKind::kOom], 1);
  std::map<EventKind, int> kinds1;
  for (const LogEntry& e : ReadLog(1)) {
    ++kinds1[e.kind()];
    EXPECT_EQ(e.record.device, 1);
  }
  EXPECT_EQ(kinds1[EventKind::kSegmentAlloc], 1);
  EXPECT_EQ(kinds1[EventKind::kSegmentFree], 1);
}

// Freed at exit by a static destructor, after fragscope stopped (Note [Nothing after exit began]).
void* g_freed_at_exit = nullptr;
struct FreeAtExit {
  ~FreeAtExit() {
    if (g_freed_at_exit == nullptr) return;
    const int error = cudaFree(g_freed_at_exit);
    if (error != 0) {
      const char message[] = "preload_test: cudaFree at exit failed\n";
      (void)!write(2, message, sizeof(message) - 1);
      _exit(3);
    }
  }
} g_free_at_exit;

TEST(PreloadTest, CacheModeServesAndReusesBlocks) {
  if (ExpectedMode() != "cache" || Env("EXPECT_BAD_CONF") == "1") GTEST_SKIP() << "cache mode";
  ASSERT_EQ(cudaSetDevice(0), 0);
  const StubCudartCounters start = Counters();
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), 0);
  std::memset(p, 1, 1000);  // inside a real stub segment
  StubCudartCounters now = Counters();
  EXPECT_EQ(now.malloc_calls - start.malloc_calls, 1) << "one 2 MiB segment";
  EXPECT_EQ(now.live_bytes - start.live_bytes, 2 * kMiB);

  ASSERT_EQ(cudaFree(p), 0);
  now = Counters();
  EXPECT_EQ(now.free_calls, start.free_calls) << "the segment stays cached";
  EXPECT_EQ(now.device_synchronize_calls - start.device_synchronize_calls, 1)
      << "cudaFree keeps its implicit synchronization";

  void* q = nullptr;
  ASSERT_EQ(cudaMalloc(&q, 1500), 0);
  EXPECT_EQ(q, p) << "served from the cache";
  EXPECT_EQ(Counters().malloc_calls - start.malloc_calls, 1);

  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), 0);
  EXPECT_EQ(total_bytes, 256 * kMiB);
  EXPECT_EQ(free_bytes, 256 * kMiB - 512 * 3) << "cached free bytes count as free";

  void* r = nullptr;
  ASSERT_EQ(cudaMallocAsync(&r, 30 * kMiB, Stream(5)), 0);
  EXPECT_EQ(Counters().malloc_async_calls, start.malloc_async_calls) << "not the runtime's";
  ASSERT_EQ(cudaFreeAsync(r, Stream(5)), 0);
  EXPECT_EQ(Counters().free_calls, start.free_calls);

  EXPECT_EQ(cudaMalloc(&r, size_t{1} << 40), 2) << "OOM is cudaErrorMemoryAllocation";
  const StubCudartCounters before_null = Counters();
  EXPECT_EQ(cudaFree(nullptr), 0);
  EXPECT_EQ(Counters().free_calls - before_null.free_calls, 1) << "cudaFree(NULL) passes through";
  EXPECT_EQ(cudaFree(reinterpret_cast<void*>(0x1234)), 1) << "foreign pointers pass through";
  cudaGetLastError();

  using TextFn = size_t (*)(int, char*, size_t);
  auto stats_text = Preloaded<TextFn>("fragscope_preload_stats_text");
  std::string stats(stats_text(0, nullptr, 0) + 1, '\0');
  stats_text(0, stats.data(), stats.size());
  EXPECT_NE(stats.find("allocation.all.current 1\n"), std::string::npos) << stats;
  EXPECT_NE(stats.find("num_ooms 1\n"), std::string::npos) << stats;

  using FlushFn = int (*)();
  ASSERT_EQ(Preloaded<FlushFn>("fragscope_preload_flush")(), 0);
  std::map<EventKind, int> kinds;
  for (const LogEntry& e : ReadLog(0)) ++kinds[e.kind()];
  EXPECT_EQ(kinds[EventKind::kSegmentAlloc], 2);
  EXPECT_EQ(kinds[EventKind::kAlloc], 3);
  EXPECT_EQ(kinds[EventKind::kFreeRequested], 2);
  EXPECT_EQ(kinds[EventKind::kOom], 1);

  g_freed_at_exit = q;  // still allocated: freed by g_free_at_exit's destructor
}

TEST(PreloadTest, CacheModeWithABadConfRefusesToAllocate) {
  if (ExpectedMode() != "cache" || Env("EXPECT_BAD_CONF") != "1") {
    GTEST_SKIP() << "cache mode with an invalid FRAGSCOPE_ALLOC_CONF only";
  }
  ::testing::internal::CaptureStderr();
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 1000), 3) << "cudaErrorInitializationError";
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find(absl::StrCat("FRAGSCOPE_ALLOC_CONF=\"", Env("FRAGSCOPE_ALLOC_CONF"), "\"")),
            std::string::npos)
      << err;
}

// The events of device 0's log after the marker `text`, read as the analyzer reads them, with the
// source that holds their contexts.
struct LogEvents {
  std::unique_ptr<FslogSource> source;
  std::vector<TraceEvent> events;
};

LogEvents EventsAfterMarker(const std::string& text) {
  const std::string path =
      absl::StrReplaceAll(Env("FRAGSCOPE_LOG"), {{"%p", absl::StrCat(getpid())}, {"%d", "0"}});
  absl::StatusOr<std::unique_ptr<FslogSource>> source =
      FslogSource::Open(path, FslogReading::kCallingThread);
  EXPECT_TRUE(source.ok()) << source.status();
  LogEvents log;
  if (!source.ok()) return log;
  log.source = *std::move(source);
  bool after = false;
  TraceEvent event;
  while (true) {
    absl::StatusOr<bool> more = log.source->Next(&event);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    if (after) log.events.push_back(event);
    after = after || (event.kind == EventKind::kMarker && event.text == text);
  }
  EXPECT_TRUE(after) << "no marker \"" << text << "\" in " << path;
  return log;
}

std::string ModuleOf(const TraceEvent& event) {
  return event.context != nullptr ? event.context->module : "<none>";
}

// fragscope_preload_define_context / _set_context / _tag_block_context: the thread's context
// names the allocations (cache mode's alloc records) and the refused request (both modes' oom
// records); a tag gives a block a new role and context. Observe mode's segment records carry no
// context (fslog/FORMAT.md).
TEST(PreloadTest, ContextsNameTheAllocationsAndTheRefusedRequest) {
  const std::string mode = ExpectedMode();
  if (mode != "observe" && (mode != "cache" || Env("EXPECT_BAD_CONF") == "1")) {
    GTEST_SKIP() << "observe and cache modes with a log";
  }
  using DefineFn = uint32_t (*)(int, const char*, const char*, const char*, int);
  using SetFn = void (*)(uint32_t);
  using TagFn = int (*)(const void*, int, int, uint32_t);
  using MarkFn = void (*)(const char*);
  using FlushFn = int (*)();
  auto define = Preloaded<DefineFn>("fragscope_preload_define_context");
  auto set = Preloaded<SetFn>("fragscope_preload_set_context");
  auto tag = Preloaded<TagFn>("fragscope_preload_tag_block_context");
  ASSERT_NE(define, nullptr);
  ASSERT_NE(set, nullptr);
  ASSERT_NE(tag, nullptr);
  ASSERT_EQ(cudaSetDevice(0), 0);
  Preloaded<MarkFn>("fragscope_preload_mark")("contexts");

  const uint32_t attn = define(6, "model.h.0.attn", "aten::bmm", "train.py:12 in step", 0);
  ASSERT_NE(attn, 0u);
  EXPECT_EQ(define(6, "model.h.0.attn", "aten::bmm", "train.py:12 in step", 0), attn)
      << "interned once per process";
  const uint32_t weights = define(1, "model.h.0.mlp", nullptr, nullptr, 0);
  ASSERT_NE(weights, 0u);
  const uint32_t mlp_backward = define(0, "model.h.0.mlp", "", "", 1);
  EXPECT_NE(mlp_backward, weights);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(define(99, "x", nullptr, nullptr, 0), 0u);
  EXPECT_EQ(tag(nullptr, 0, -1, 0), -1);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("role 99 is not"), std::string::npos);

  set(attn);
  void* block = nullptr;
  ASSERT_EQ(cudaMalloc(&block, 3000), 0);
  void* huge = nullptr;
  EXPECT_EQ(cudaMalloc(&huge, size_t{1} << 40), 2) << "cudaErrorMemoryAllocation";
  cudaGetLastError();
  set(mlp_backward);
  void* grad = nullptr;
  ASSERT_EQ(cudaMalloc(&grad, 5000), 0);
  set(0);
  void* plain = nullptr;
  ASSERT_EQ(cudaMalloc(&plain, 7000), 0);
  EXPECT_EQ(tag(block, 0, 1, weights), 0);
  ASSERT_EQ(cudaFree(plain), 0);
  ASSERT_EQ(cudaFree(grad), 0);
  ASSERT_EQ(cudaFree(block), 0);
  ASSERT_EQ(Preloaded<FlushFn>("fragscope_preload_flush")(), 0);

  std::vector<std::string> allocs, segments, ooms, tags;
  const LogEvents log = EventsAfterMarker("contexts");
  for (const TraceEvent& e : log.events) {
    if (e.kind == EventKind::kAlloc) {
      allocs.push_back(absl::StrCat(e.requested_bytes, " ", ModuleOf(e)));
      if (e.context != nullptr && e.requested_bytes == 3000) {
        EXPECT_EQ(e.context->role, AllocationRole::kTemporaries);
        EXPECT_EQ(e.context->op, "aten::bmm");
        EXPECT_EQ(e.context->site, "train.py:12 in step");
        EXPECT_FALSE(e.context->backward);
      }
      if (e.context != nullptr && e.requested_bytes == 5000) {
        EXPECT_TRUE(e.context->backward);
      }
    } else if (e.kind == EventKind::kSegmentAlloc) {
      segments.push_back(absl::StrCat(e.bytes, " ", ModuleOf(e)));
    } else if (e.kind == EventKind::kOom) {
      ooms.push_back(ModuleOf(e));
    } else if (e.kind == EventKind::kTag) {
      tags.push_back(absl::StrCat(std::string(AllocationRoleName(e.role)), " ", ModuleOf(e)));
      EXPECT_EQ(e.ptr, reinterpret_cast<uint64_t>(block));
    }
  }
  EXPECT_EQ(ooms, std::vector<std::string>{"model.h.0.attn"});
  if (mode == "cache") {
    EXPECT_EQ(allocs, (std::vector<std::string>{"3000 model.h.0.attn", "5000 model.h.0.mlp",
                                                "7000 <none>"}));
    EXPECT_EQ(tags, std::vector<std::string>{"weights model.h.0.mlp"});
  } else {
    EXPECT_TRUE(allocs.empty());
    EXPECT_EQ(segments, (std::vector<std::string>{"3000 <none>", "5000 <none>", "7000 <none>"}));
    // Observe mode's log has no blocks, only segments: the tag record is written all the same.
    EXPECT_EQ(tags, std::vector<std::string>{"weights model.h.0.mlp"});
  }
}

}  // namespace
}  // namespace fragscope
