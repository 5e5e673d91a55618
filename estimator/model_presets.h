// Built-in model architectures, from the models' published configs (Hugging Face config.json or
// the papers). Parameter counts they reproduce are asserted in tests/estimator.
//
//   gpt2-small/-medium/-large/-xl  Radford et al. 2019; HF gpt2*: V 50257, 1024 learned positions
//   llama-2-7b/-13b/-70b           Touvron et al. 2023; HF meta-llama/Llama-2-*-hf
//   llama-3-8b/-70b                HF meta-llama/Meta-Llama-3-*: V 128256, GQA g = 8
//   gpt-3-175b                     Brown et al. 2020, Table 2.1: h 12288, L 96, a 96, 2048
//   positions bloom-176b                     HF bigscience/bloom: V 250880, h 14336, L 70, a 112,
//   ALiBi opt-125m ... opt-175b          Zhang et al. 2022, Table 1; HF facebook/opt-*: V 50272,
//   2050
//                                  learned positions (2048 + OPT's offset of 2). opt-350m is left
//                                  out: it projects 512-wide embeddings and uses post-LayerNorm.
//   mixtral-8x7b                   HF mistralai/Mixtral-8x7B-v0.1: 8 experts, top-2 (an MoE
//   example)
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "estimator/model_spec.h"

namespace fragscope::estimator {

// All presets, in display order.
const std::vector<ModelSpec>& ModelPresets();

// Case-insensitive lookup; also accepts "gpt2" for gpt2-small and "gpt3-175b" / "gpt-3" for
// gpt-3-175b. An unknown name is kNotFound listing the known names.
absl::StatusOr<ModelSpec> FindModelPreset(absl::string_view name);

}  // namespace fragscope::estimator
