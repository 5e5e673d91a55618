// Status helpers for tests (Abseil 20220623 ships no status matchers).
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"

#define FRAGSCOPE_TEST_CONCAT_INNER(a, b) a##b
#define FRAGSCOPE_TEST_CONCAT(a, b) FRAGSCOPE_TEST_CONCAT_INNER(a, b)

#define EXPECT_OK(expr)                                                     \
  do {                                                                      \
    const ::absl::Status fs_status_ = ::fragscope::testing::ToStatus(expr); \
    EXPECT_TRUE(fs_status_.ok()) << fs_status_;                             \
  } while (false)

#define ASSERT_OK(expr)                                                     \
  do {                                                                      \
    const ::absl::Status fs_status_ = ::fragscope::testing::ToStatus(expr); \
    ASSERT_TRUE(fs_status_.ok()) << fs_status_;                             \
  } while (false)

#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL(FRAGSCOPE_TEST_CONCAT(fs_statusor_, __LINE__), lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL(statusor, lhs, expr) \
  auto statusor = (expr);                              \
  ASSERT_TRUE(statusor.ok()) << statusor.status();     \
  lhs = *std::move(statusor)

namespace fragscope::testing {
inline absl::Status ToStatus(const absl::Status& s) { return s; }
template <typename T>
absl::Status ToStatus(const absl::StatusOr<T>& s) {
  return s.status();
}
}  // namespace fragscope::testing
