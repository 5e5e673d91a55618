// The JSON a viewer data script "FragscopeView.CALL(ARGS);" carries (analysis/view/README.md,
// "Data contract"), for the view tests.
#pragma once

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace fragscope::testing {

// The JSON argument of a meta or layout script (a layout's id dropped; a view of one trace, whose
// scripts carry no source argument).
inline nlohmann::json ScriptJson(const std::string& script, const std::string& call) {
  const std::string prefix = absl::StrCat("FragscopeView.", call, "(");
  EXPECT_TRUE(absl::StartsWith(script, prefix)) << script.substr(0, 80);
  std::string args = script.substr(prefix.size(), script.rfind(");") - prefix.size());
  if (call == "layout") args = args.substr(args.find(", ") + 2);  // drop the id
  return nlohmann::json::parse(args);
}

}  // namespace fragscope::testing
