// The adapter keys of a training job's model record (fragscope.predict's --lora / --qlora, via
// model_record.py): "lora_rank" (N), "lora_targets" ("q_proj,v_proj": Hugging Face names or
// fragscope's q,k,v,o,gate,up,down, or "all"/"all-linear"), "quant" ("nf4": QLoRA's 4-bit base)
// and "double_quant" (true or false). "lora_alpha" and "lora_dropout" change no memory the
// estimator costs and are passed over. A target the estimator does not cost (GPT-2's fused
// c_attn) is an error naming the key: the record is then not used, rather than costed as
// another model's adapters.
#pragma once

#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "estimator/lora.h"
#include "nlohmann/json.hpp"

namespace fragscope {

// Applies `name` = `value` to `lora` when it is an adapter key (true), else false; errors name
// `where` ("model record: job.lora_rank"). Adds the key to `given`.
absl::StatusOr<bool> ApplyRecordedAdapterKey(const std::string& name, const nlohmann::json& value,
                                             const std::string& where, estimator::LoraConfig* lora,
                                             std::set<std::string>* given);

}  // namespace fragscope
