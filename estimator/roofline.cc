#include "estimator/roofline.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include "estimator/parameter_count.h"
#include "estimator/status_macros.h"

namespace fragscope::estimator {
namespace {

constexpr char kRooflineSource[] =
    "roofline: kipp.ly transformer inference arithmetic; cli99/llm-analysis (max of compute and "
    "memory time)";

Term Quantity(std::string key, std::string label, double value, Unit unit, std::string formula,
              std::string values) {
  return Term{std::move(key),     std::move(label),  value,          unit, Placement::kDevice,
              std::move(formula), std::move(values), kRooflineSource};
}

}  // namespace

absl::StatusOr<std::vector<Term>> RooflineTerms(const ModelSpec& spec,
                                                const InferenceConfig& config, const GpuSpec& gpu,
                                                const RooflineOptions& options) {
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const ParameterCount count, CountParameters(spec));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(ValidateInferenceConfig(config));
  if (!(options.compute_efficiency > 0 && options.compute_efficiency <= 1) ||
      !(options.bandwidth_efficiency > 0 && options.bandwidth_efficiency <= 1)) {
    return absl::InvalidArgumentError("mfu and bw-efficiency must be in (0, 1]");
  }
  if (!(gpu.peak_flops > 0 && gpu.bandwidth > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpu '", gpu.name, "' has no FLOP/s or bandwidth for the roofline"));
  }
  const bool arch = count.architectural;
  if (config.context > 0) {
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(RequireArchitecture(spec, "the KV cache"));
  }
  const double b = static_cast<double>(config.batch);
  const double c = static_cast<double>(config.context);
  const double s_p =
      static_cast<double>(config.prompt_tokens > 0 ? config.prompt_tokens : config.context);
  const double gpus = static_cast<double>(config.layout.tp);  // pp stages run in sequence
  const double scale = count.given_count_scale();
  const double m = arch ? static_cast<double>(count.matmul_weights_active) * scale
                        : static_cast<double>(count.total);
  const double l = static_cast<double>(spec.num_layers);
  const double q = static_cast<double>(arch ? spec.query_width() : 0);
  const double bytes_per_weight = BytesPerElement(config.weights);
  const double all_weights = static_cast<double>(count.total) * bytes_per_weight;
  const double peak = gpu.peak_flops * options.compute_efficiency * gpus;
  const double bandwidth = gpu.bandwidth * options.bandwidth_efficiency * gpus;

  std::vector<Term> terms;
  const double prefill_flops = 2.0 * m * s_p * b + 4.0 * l * s_p * s_p * q * b;
  terms.push_back(
      Quantity("prefill_flops", "prefill FLOPs (whole model)", prefill_flops, Unit::kFlops,
               "2 M s_p b + 4 L s_p^2 (a d_h) b",
               absl::StrFormat("2 * %s * %s * %s + 4 * %s * %s^2 * %s * %s", FormatCount(m),
                               FormatNumber(s_p), FormatNumber(b), FormatNumber(l),
                               FormatNumber(s_p), FormatNumber(q), FormatNumber(b))));
  terms.push_back(Quantity("prefill_bytes", "prefill bytes read (weights)", all_weights,
                           Unit::kBytes, "P * bytes(dtype)",
                           absl::StrCat(FormatCount(static_cast<double>(count.total)), " * ",
                                        FormatNumber(bytes_per_weight))));
  const auto prefill_time = [&](std::string key, std::string label, double flops) {
    terms.push_back(Quantity(
        std::move(key), std::move(label), std::max(flops / peak, all_weights / bandwidth),
        Unit::kSeconds, "max(FLOPs / (peak * e_c * tp), bytes / (bandwidth * e_b * tp))",
        absl::StrFormat("max(%s / (%s * %s * %s), %s / (%s * %s * %s))", FormatCount(flops),
                        FormatNumber(gpu.peak_flops), FormatNumber(options.compute_efficiency),
                        FormatNumber(gpus), FormatCount(all_weights), FormatNumber(gpu.bandwidth),
                        FormatNumber(options.bandwidth_efficiency), FormatNumber(gpus))));
  };
  // The prefill of a batch is of all its sequences together: each one's first token comes after
  // the whole batch's prefill. One sequence prefilled alone reads the same weights for 1/b of
  // the FLOPs.
  if (config.batch == 1) {
    prefill_time("prefill_seconds",
                 absl::StrCat("prefill time (time to first token, ", s_p, " tokens)"),
                 prefill_flops);
  } else {
    prefill_time("prefill_seconds",
                 absl::StrCat("prefill time per batch (", config.batch, " x ", s_p,
                              " tokens: each sequence's time to first token)"),
                 prefill_flops);
    prefill_time("prefill_seconds_per_sequence",
                 absl::StrCat("prefill time per sequence (", s_p, " tokens, prefilled alone)"),
                 prefill_flops / b);
  }

  // Decode: one token per sequence, attending to c cached tokens.
  double weights_read = all_weights;
  if (arch && spec.is_moe()) {
    const double experts =
        static_cast<double>(count.moe_layers * count.expert_parameters) * scale * bytes_per_weight;
    const double fraction = std::min(
        1.0, static_cast<double>(spec.experts_top_k) * b / static_cast<double>(spec.num_experts));
    weights_read = all_weights - experts * (1.0 - fraction);
  }
  const double kv_bytes = arch ? 2.0 * l * static_cast<double>(spec.kv_width()) *
                                     BytesPerElement(config.kv_cache) * c * b
                               : 0.0;
  const double decode_bytes = weights_read + kv_bytes;
  const double decode_flops = 2.0 * m * b + 4.0 * l * c * q * b;
  terms.push_back(Quantity(
      "decode_flops", "decode FLOPs per output token", decode_flops, Unit::kFlops,
      "2 M b + 4 L c (a d_h) b",
      absl::StrFormat("2 * %s * %s + 4 * %s * %s * %s * %s", FormatCount(m), FormatNumber(b),
                      FormatNumber(l), FormatNumber(c), FormatNumber(q), FormatNumber(b))));
  terms.push_back(Quantity("decode_bytes", "decode bytes read per output token", decode_bytes,
                           Unit::kBytes, "weights read + KV cache (2 L g d_h bytes(kv) c b)",
                           absl::StrCat(FormatCount(weights_read), " + ", FormatCount(kv_bytes))));
  const double decode_seconds = std::max(decode_flops / peak, decode_bytes / bandwidth);
  terms.push_back(Quantity(
      "decode_seconds",
      config.batch == 1 ? "decode time per output token (at the full context)"
                        : absl::StrCat("decode time per output token (", config.batch,
                                       " sequences, one token each; at the full context)"),
      decode_seconds, Unit::kSeconds,
      "max(FLOPs / (peak * e_c * tp), bytes / (bandwidth * e_b * tp))",
      absl::StrFormat("max(%s / (%s * %s * %s), %s / (%s * %s * %s))", FormatCount(decode_flops),
                      FormatNumber(gpu.peak_flops), FormatNumber(options.compute_efficiency),
                      FormatNumber(gpus), FormatCount(decode_bytes), FormatNumber(gpu.bandwidth),
                      FormatNumber(options.bandwidth_efficiency), FormatNumber(gpus))));
  return terms;
}

}  // namespace fragscope::estimator
