// Who holds a block, in words and in JSON: its role and its context (.fslog 2.6: the module and
// op that allocated it, in a backward pass or not, its code location), as the OOM explanations
// name the request and the blocks that pin memory.
#pragma once

#include <string>

#include "analysis/sources/trace_event.h"
#include "estimator/json_document.h"
#include "fslog/allocation_role.h"

namespace fragscope {

// "saved_activations of transformer.h.7.attn (aten::bmm)", "temporaries of lm_head
// (aten::_to_copy, in backward)", "weights"; "" when neither is known. Text from the log is kept
// as is: each rendering escapes it.
std::string HolderText(AllocationRole role, const BlockContext& context);

// {"role", "module", "op", "backward", "site"} ("" where not known).
estimator::OrderedJson HolderJson(AllocationRole role, const BlockContext& context);

// Whether the context says anything.
inline bool Known(const BlockContext& c) {
  return c.role != AllocationRole::kUnknown || !c.module.empty() || !c.op.empty() ||
         !c.site.empty();
}

}  // namespace fragscope
