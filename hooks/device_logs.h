// DeviceLogs: one FslogWriter per CUDA device of this process, opened on first use.
//
// Every hook mode writes through this: the replace mode (one writer observing each device's
// CachingAllocator), the observe mode (PyTorch's trace entries, converted) and the interposer.
// A device's log is opened the first time the device is used, so a process that sees eight GPUs
// but uses one writes one file. The file name comes from the pattern (hook_config.h: %p %r %d).
//
// An open failure is reported once on stderr and turns logging off for that device only; the job
// keeps running (the log is an observer, never a reason to fail an allocation).
//
// Thread safety: all methods are thread-safe. Get() is one atomic load. Writers live as long as
// this object; the hooks' process-wide instances are never destroyed (see process_exit.h).
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "allocator/mutex.h"
#include "fslog/fslog_writer.h"

namespace fragscope::hooks {

// Device indices 0..kMaxDevices-1 are supported by every hook.
inline constexpr int kMaxDevices = 64;

class DeviceLogs {
 public:
  // pattern "" disables logging. REQUIRES: a non-empty pattern is valid (LoadHookConfig checks).
  explicit DeviceLogs(std::string pattern, FslogWriterOptions options = {});
  ~DeviceLogs();
  DeviceLogs(const DeviceLogs&) = delete;
  DeviceLogs& operator=(const DeviceLogs&) = delete;

  bool enabled() const { return !pattern_.empty(); }
  const std::string& pattern() const { return pattern_; }

  // The device's writer, opened now with make_info() if it is not yet; nullptr when logging is off,
  // the device is out of range, or the open failed (reported once).
  FslogWriter* GetOrOpen(int device, const std::function<FslogHeaderInfo()>& make_info);
  // The device's writer if it is open, else nullptr. Inline: on every hook's hot path.
  FslogWriter* Get(int device) const {
    if (device < 0 || device >= kMaxDevices) return nullptr;
    return writers_[static_cast<size_t>(device)].load(std::memory_order_acquire);
  }

  // A marker in every open log. Markers made while no log is open yet (a job's "step 0" before
  // its first allocation) are kept, up to kMaxEarlyMarkers, and written into each log when it
  // opens, so they are not lost.
  void MarkAll(std::string_view text);

  static constexpr size_t kMaxEarlyMarkers = 64;

  // The job's model (Note [Model records]) in every open log, and in every log opened later.
  void RecordModelAll(std::string_view json);
  // Who holds the memory (Note [Context records] in fslog/fslog_context.h): the id of the context
  // (role, module path, op, code location, backward), interned once per process, its strings and
  // itself defined in every open log and in every log opened later. 0 when logging is off.
  uint32_t DefineContextAll(uint8_t role, std::string_view module, std::string_view op,
                            std::string_view site, bool backward);

  // Flushes every open log; the first error.
  absl::Status FlushAll();

 private:
  std::string pattern_;
  FslogWriterOptions options_;
  Mutex mu_;
  std::array<std::unique_ptr<FslogWriter>, kMaxDevices> owned_ ABSL_GUARDED_BY(mu_);
  std::array<bool, kMaxDevices> failed_ ABSL_GUARDED_BY(mu_){};
  std::vector<std::string> early_markers_ ABSL_GUARDED_BY(mu_);
  std::string model_json_ ABSL_GUARDED_BY(mu_);  // the last RecordModelAll's
  uint32_t StringIdLocked(std::string_view text) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DefineAllLocked(FslogWriter* writer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Interned strings (id = index + 1) and contexts (id = index + 1).
  absl::flat_hash_map<std::string, uint32_t> string_ids_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> strings_ ABSL_GUARDED_BY(mu_);
  // role, backward, and the module's, op's and site's string ids -> the context's id
  absl::flat_hash_map<std::tuple<uint8_t, bool, uint32_t, uint32_t, uint32_t>, uint32_t>
      context_ids_ ABSL_GUARDED_BY(mu_);
  std::vector<ContextDefinition> contexts_ ABSL_GUARDED_BY(mu_);
  std::array<std::atomic<FslogWriter*>, kMaxDevices> writers_{};
};

}  // namespace fragscope::hooks
