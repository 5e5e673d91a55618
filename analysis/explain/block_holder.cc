#include "analysis/explain/block_holder.h"

#include "absl/strings/str_cat.h"

namespace fragscope {

std::string HolderText(AllocationRole role, const BlockContext& context) {
  std::string text = role == AllocationRole::kUnknown ? "" : std::string(AllocationRoleName(role));
  if (!context.module.empty()) {
    absl::StrAppend(&text, text.empty() ? "" : " of ", context.module);
  }
  if (!context.op.empty() || context.backward) {
    absl::StrAppend(&text, text.empty() ? "" : " ", "(", context.op,
                    context.op.empty() || !context.backward ? "" : ", ",
                    context.backward ? "in backward" : "", ")");
  }
  if (!context.site.empty()) absl::StrAppend(&text, text.empty() ? "" : " ", "at ", context.site);
  return text;
}

estimator::OrderedJson HolderJson(AllocationRole role, const BlockContext& context) {
  estimator::OrderedJson j;
  j["role"] = AllocationRoleName(role);
  j["module"] = context.module;
  j["op"] = context.op;
  j["backward"] = context.backward;
  j["site"] = context.site;
  return j;
}

}  // namespace fragscope
