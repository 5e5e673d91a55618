// Status plumbing for estimator/. The estimator depends on std and Abseil only (DESIGN.md), so it
// cannot use allocator/check.h; these macros carry an ESTIMATOR infix so that a translation unit
// including both headers sees no redefinition.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define FRAGSCOPE_ESTIMATOR_CONCAT_INNER(a, b) a##b
#define FRAGSCOPE_ESTIMATOR_CONCAT(a, b) FRAGSCOPE_ESTIMATOR_CONCAT_INNER(a, b)

// Evaluates `expr` (an absl::Status) and returns it from the enclosing function if it is not OK.
#define FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(expr)                            \
  do {                                                                       \
    ::absl::Status fragscope_estimator_status = (expr);                      \
    if (!fragscope_estimator_status.ok()) return fragscope_estimator_status; \
  } while (false)

// Evaluates `expr` (an absl::StatusOr<T>); on error returns its status, otherwise moves the value
// into `lhs` (which may be a declaration such as `auto x`).
#define FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(lhs, expr) \
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN_IMPL(            \
      FRAGSCOPE_ESTIMATOR_CONCAT(fragscope_estimator_statusor_, __LINE__), lhs, expr)

#define FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr) \
  auto statusor = (expr);                                              \
  if (!statusor.ok()) return statusor.status();                        \
  lhs = std::move(statusor).value()
