// Backend failures the caching allocator cannot return to anyone: those while freeing or
// releasing memory (inside Allocate's retry ladder, EmptyCache, or a free). They are reported on
// stderr and the memory concerned is written off; the allocator's own state stays consistent.
#pragma once

#include <cstdio>
#include <string>

#include "absl/status/status.h"

namespace fragscope::internal {

inline void ReportBackendError(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "fragscope: %s failed: %s\n", what, std::string(status.message()).c_str());
}

}  // namespace fragscope::internal
