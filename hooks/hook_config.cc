#include "hooks/hook_config.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/alloc_conf_env.h"
#include "fslog/fslog_writer.h"

namespace fragscope::hooks {

absl::StatusOr<std::string> ExpandDeviceLogPattern(std::string_view pattern, int device) {
  std::string out;
  bool saw_device = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') {
      out.push_back(pattern[i]);
      continue;
    }
    if (i + 1 == pattern.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("log path pattern \"%s\" ends with a lone %%", pattern));
    }
    const char next = pattern[++i];
    if (next == 'd') {
      absl::StrAppend(&out, device);
      saw_device = true;
    } else if (next == 'p' || next == 'r' || next == '%') {
      out.push_back('%');
      out.push_back(next);
    } else {
      return absl::InvalidArgumentError(
          absl::StrFormat("log path pattern \"%s\": unknown placeholder %%%c (use %%p pid, %%r "
                          "rank, %%d device, %%%% a percent sign)",
                          pattern, next));
    }
  }
  if (saw_device || device == 0) return out;
  // Insert ".devN" before the extension of the last path component.
  const size_t slash = out.rfind('/');
  const size_t name_start = slash == std::string::npos ? 0 : slash + 1;
  size_t dot = out.rfind('.');
  if (dot == std::string::npos || dot <= name_start) dot = out.size();
  out.insert(dot, absl::StrCat(".dev", device));
  return out;
}

absl::StatusOr<HookConfig> LoadHookConfig(std::optional<std::string_view> conf,
                                          std::optional<std::string_view> log_pattern) {
  std::optional<std::string> env_conf, env_log;
  if (!conf.has_value()) {
    env_conf = ProcessEnv(kAllocConfEnv);
    conf = env_conf.has_value() ? std::string_view(*env_conf) : std::string_view();
  }
  if (!log_pattern.has_value()) {
    env_log = ProcessEnv(kLogEnv);
    log_pattern = env_log.has_value() ? std::string_view(*env_log) : std::string_view();
  }
  const char* conf_name = env_conf.has_value() ? kAllocConfEnv : "allocator conf";
  const char* log_name = env_log.has_value() ? kLogEnv : "log path";

  HookConfig config;
  absl::StatusOr<AllocatorOptions> options = ParseAllocatorOptions(*conf);
  if (!options.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s=\"%s\": %s", conf_name, *conf, options.status().message()));
  }
  config.options = *std::move(options);
  if (config.options.backend != "native") {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s=\"%s\": backend:%s is not supported by fragscope (it implements the "
                        "native caching allocator only)",
                        conf_name, *conf, config.options.backend));
  }
  if (!log_pattern->empty()) {
    absl::StatusOr<std::string> expanded = ExpandDeviceLogPattern(*log_pattern, 0);
    if (expanded.ok()) {
      expanded = ExpandPathPattern(*expanded, static_cast<int64_t>(getpid()), 0);
    }
    if (!expanded.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s=\"%s\": %s", log_name, *log_pattern, expanded.status().message()));
    }
    config.log_pattern = std::string(*log_pattern);
  }
  if (std::optional<std::string> level = ProcessEnv(kLogZstdEnv); level.has_value()) {
    int parsed = 0;
    if (!absl::SimpleAtoi(*level, &parsed) || parsed < 0 || parsed > 19) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s=\"%s\": expected a zstd level from 1 to 19 (0: no compression)",
                          kLogZstdEnv, *level));
    }
    config.log_options.zstd_level = parsed;
  }
  return config;
}

}  // namespace fragscope::hooks
