// Assertion and Status-propagation macros.
//
// FRAGSCOPE_CHECK(cond) is always on and aborts with file:line and the condition; use it for
// invariants whose violation means memory corruption. FRAGSCOPE_DCHECK is the debug-only form.
// Expected failures are absl::Status, propagated with FRAGSCOPE_RETURN_IF_ERROR and
// FRAGSCOPE_ASSIGN_OR_RETURN (Abseil 20220623 has neither).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fragscope::internal {
[[noreturn]] inline void CheckFailed(const char* file, int line, const char* condition) {
  std::fprintf(stderr, "fragscope: CHECK failed at %s:%d: %s\n", file, line, condition);
  std::abort();
}
}  // namespace fragscope::internal

#define FRAGSCOPE_CHECK(cond)                                                   \
  do {                                                                          \
    if (!(cond)) ::fragscope::internal::CheckFailed(__FILE__, __LINE__, #cond); \
  } while (false)

#ifdef NDEBUG
#define FRAGSCOPE_DCHECK(cond) \
  do {                         \
  } while (false && (cond))
#else
#define FRAGSCOPE_DCHECK(cond) FRAGSCOPE_CHECK(cond)
#endif

#define FRAGSCOPE_STATUS_CONCAT_INNER(a, b) a##b
#define FRAGSCOPE_STATUS_CONCAT(a, b) FRAGSCOPE_STATUS_CONCAT_INNER(a, b)

#define FRAGSCOPE_RETURN_IF_ERROR(expr)                    \
  do {                                                     \
    ::absl::Status fragscope_status_ = (expr);             \
    if (!fragscope_status_.ok()) return fragscope_status_; \
  } while (false)

#define FRAGSCOPE_ASSIGN_OR_RETURN(lhs, expr) \
  FRAGSCOPE_ASSIGN_OR_RETURN_IMPL(FRAGSCOPE_STATUS_CONCAT(fragscope_statusor_, __LINE__), lhs, expr)

#define FRAGSCOPE_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr) \
  auto statusor = (expr);                                    \
  if (!statusor.ok()) return std::move(statusor).status();   \
  lhs = *std::move(statusor)
