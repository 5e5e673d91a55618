// HookConfig: what the environment (or an explicit call) asks of fragscope inside a job.
//
// Every hook reads its configuration once, through this file:
//   FRAGSCOPE_ALLOC_CONF   allocator options, PYTORCH_CUDA_ALLOC_CONF syntax
//   (ParseAllocatorOptions) FRAGSCOPE_LOG          .fslog path pattern; "" or unset = no log
//   FRAGSCOPE_LOG_ZSTD     compress the logs' chunks at this zstd level (1-19; 0 or unset: no)
// Errors name the variable, the key and the value, so the one stderr line a job prints is enough
// to fix it.
//
// Log path patterns: FslogWriter expands %p (pid), %r (rank) and %%. One log is written per
// process *and device*, so hooks add %d (the CUDA device index). A pattern without %d keeps its
// name for device 0 and gets ".devN" before the extension for device N > 0
// ("run.fslog" -> "run.dev1.fslog"), so a multi-device process never writes two logs to one file.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "allocator/allocator_options.h"
#include "fslog/fslog_writer.h"

namespace fragscope::hooks {

inline constexpr char kAllocConfEnv[] = "FRAGSCOPE_ALLOC_CONF";
inline constexpr char kLogEnv[] = "FRAGSCOPE_LOG";
// zstd level (1 to 19) at which the logs' chunks are compressed; unset or 0: not compressed.
inline constexpr char kLogZstdEnv[] = "FRAGSCOPE_LOG_ZSTD";

struct HookConfig {
  AllocatorOptions options;
  std::string log_pattern;  // "" = no log; otherwise validated (expands without error)
  // The log writers' options (FRAGSCOPE_LOG_ZSTD sets zstd_level).
  FslogWriterOptions log_options;
};

// Builds the configuration from explicit values, or from the environment where a value is
// nullopt. Errors are kInvalidArgument, e.g.
// "FRAGSCOPE_ALLOC_CONF=\"max_split_size_mb:2\": max_split_size_mb: 2 is too small, must be >= 20".
absl::StatusOr<HookConfig> LoadHookConfig(std::optional<std::string_view> conf,
                                          std::optional<std::string_view> log_pattern);

// The pattern for `device`'s log: %d replaced by the device index (or ".devN" inserted, see the
// file comment). %p, %r and %% are left for FslogWriter. Other % uses are kInvalidArgument.
absl::StatusOr<std::string> ExpandDeviceLogPattern(std::string_view pattern, int device);

}  // namespace fragscope::hooks
