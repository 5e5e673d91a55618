#include "estimator/reference/megatron.h"

#include <algorithm>

namespace fragscope::estimator::reference {

int64_t MegatronPaddedVocab(int64_t vocab_size, int64_t tp, int64_t divisible_by) {
  const int64_t multiple = divisible_by * tp;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

double MegatronBytesPerParameter(bool distributed_optimizer, int64_t dp) {
  return distributed_optimizer ? 6.0 + 12.0 / static_cast<double>(dp) : 18.0;
}

double MegatronTableBytesPerParameter(MegatronDTypeRow row, bool distributed_optimizer,
                                      int64_t dp) {
  const double d = static_cast<double>(dp);
  switch (row) {
    case MegatronDTypeRow::kFp16Fp16:
      return distributed_optimizer ? 4.0 + 16.0 / d : 20.0;
    case MegatronDTypeRow::kBf16Fp32:
      return distributed_optimizer ? 6.0 + 12.0 / d : 18.0;
    case MegatronDTypeRow::kFp32Fp32:
      return distributed_optimizer ? 8.0 + 8.0 / d : 16.0;
  }
  return 0;
}

double MegatronParametersOnStage0(const MegatronArgs& args) {
  const double h = static_cast<double>(args.hidden_size);
  const double a = static_cast<double>(args.num_attention_heads);
  const double g = static_cast<double>(args.num_query_groups > 0 ? args.num_query_groups
                                                                 : args.num_attention_heads);
  const double kv_channels = args.kv_channels > 0 ? static_cast<double>(args.kv_channels) : h / a;
  const double query_projection_ratio = kv_channels * a / h;
  const double f = static_cast<double>(args.ffn_hidden_size);
  const double l = static_cast<double>(args.num_layers);
  const double t = static_cast<double>(args.tp);
  const double p = static_cast<double>(args.pp);
  const double n_norm = args.rms_norm ? 1.0 : 2.0;

  const double attention = 2.0 * h * h * (1.0 + g / a) * query_projection_ratio;
  const double mlp = 2.0 * h * f * (args.swiglu ? 1.5 : 1.0);
  const double norms_per_layer = 2.0 * h * n_norm;
  const double embedding = h * static_cast<double>(args.padded_vocab_size);
  const double block = l * (attention + mlp);
  const double replicated = l * norms_per_layer + n_norm * h;  // incl. the final norm

  double on_stage0 = (block / p + embedding) / t + replicated / p;
  if (args.untie_embeddings && args.pp == 1) on_stage0 += embedding / t;
  return on_stage0;
}

double MegatronWeightAndOptimizerBytes(const MegatronArgs& args) {
  return MegatronParametersOnStage0(args) *
         MegatronBytesPerParameter(args.distributed_optimizer, args.dp);
}

double MegatronActivationBytes(const MegatronArgs& args) {
  const double s = static_cast<double>(args.seq_length);
  const double b = static_cast<double>(args.micro_batch_size);
  const double h = static_cast<double>(args.hidden_size);
  const double f = static_cast<double>(args.ffn_hidden_size);
  const double l = static_cast<double>(args.num_layers);
  const double t = static_cast<double>(args.tp);
  const double p = static_cast<double>(args.pp);
  const double v = static_cast<double>(args.padded_vocab_size);
  const double m = static_cast<double>(args.num_microbatches);
  const bool sp_path = args.sequence_parallel && args.selective_recompute;

  double bytes = sp_path ? s * b * h * (18.0 + 4.0 * f / h) : s * b * h * (10.0 + 24.0 / t);
  bytes *= l;
  bytes += 8.0 * s * b * p;  // input to embedding
  bytes += s * b * h * p;    // embedding dropout
  if (args.vpp > 1) {
    bytes *= 1.0 + (p - 1.0) / (p * static_cast<double>(args.vpp));
  } else if (args.pp > 1) {
    bytes *= std::min(1.0, m / p);
  }
  if (sp_path) {
    if (args.pp == 1) bytes += 4.0 * s * b * h * (1.0 + v / h);
    return bytes / t;
  }
  if (args.pp == 1) bytes += 2.0 * (s * b * v / t + s * b * h);
  return bytes * 1.05;
}

}  // namespace fragscope::estimator::reference
