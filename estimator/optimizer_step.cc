#include "estimator/optimizer_step.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fragscope::estimator {
namespace {

constexpr char kSource[] = "PyTorch 2.11 torch/optim/adam.py, sgd.py (estimator/optimizer_step.h)";

}  // namespace

double LargestParameterTensor(const ModelSpec& spec) {
  const double h = static_cast<double>(spec.hidden_size);
  const double q = static_cast<double>(spec.query_width());
  const double k = static_cast<double>(spec.kv_width());
  const double f = static_cast<double>(spec.ffn());
  const double mlp_in = spec.gated_mlp && spec.fused_gate_up ? 2.0 : 1.0;
  double largest = static_cast<double>(spec.vocab_size) * h;
  largest = std::max(largest, (spec.fused_qkv ? q + 2.0 * k : q) * h);
  largest = std::max(largest, mlp_in * f * h);
  if (spec.is_moe()) {
    const double experts = static_cast<double>(spec.num_experts);
    const double fe = static_cast<double>(spec.expert_ffn());
    largest = std::max(largest, experts * (spec.gated_mlp ? 2.0 : 1.0) * fe * h);
  }
  return largest;
}

std::optional<Term> OptimizerStepTerm(const ModelSpec& spec, const TrainingConfig& config,
                                      double params) {
  Term term{.key = "optimizer_step", .formula = "0", .values = "0", .source = kSource};
  const std::string name =
      absl::StrCat(OptimizerName(config.optimizer), " ", OptimizerImplName(config.optimizer_impl));
  switch (config.optimizer) {
    case Optimizer::kAdam8Bit:
    case Optimizer::kAdafactor:
      return std::nullopt;
    case Optimizer::kSgd:
    case Optimizer::kSgdMomentum:
      term.label = absl::StrCat("optimizer step temporaries (", name, ": in place)");
      return term;
    case Optimizer::kAdam:
    case Optimizer::kAdamW:
      break;
  }
  switch (config.optimizer_impl) {
    case OptimizerImpl::kForeach:
      term.label = absl::StrCat("optimizer step temporaries (", name, ": _foreach_sqrt(v), fp32)");
      term.value = 4.0 * params;
      term.formula = "4 P_opt";
      term.values = absl::StrFormat("4 * %s", FormatCount(params));
      break;
    case OptimizerImpl::kFused:
      term.label = absl::StrCat("optimizer step temporaries (", name, ": in place)");
      break;
    case OptimizerImpl::kForLoop: {
      if (!spec.has_architecture()) {
        // A bare count has no tensor shapes: the whole count bounds the largest tensor.
        term.value = 8.0 * params;
        term.formula = "8 P_opt  (no architecture: the largest tensor bounded by the count)";
        term.values = absl::StrFormat("8 * %s", FormatCount(params));
      } else {
        const double largest = LargestParameterTensor(spec);
        term.value = 8.0 * largest;
        term.formula = "8 n_max  (sqrt and quotient of the largest parameter, fp32)";
        term.values = absl::StrFormat("8 * %s", FormatCount(largest));
      }
      term.label = absl::StrCat("optimizer step temporaries (", name, ": one parameter's denom)");
      break;
    }
  }
  return term;
}

}  // namespace fragscope::estimator
