#include "estimator/reference/eleuther.h"

#include "estimator/units.h"

namespace fragscope::estimator::reference {

EleutherResult EleutherTrainingMemory(const EleutherArgs& args) {
  const double v = static_cast<double>(args.vocab_size);
  const double h = static_cast<double>(args.hidden_size);
  const double l = static_cast<double>(args.num_layers);
  const double a = static_cast<double>(args.num_attention_heads);
  const double s = static_cast<double>(args.sequence_length);
  const double b = static_cast<double>(args.batch_size_per_gpu);
  const double n = static_cast<double>(args.num_gpus);
  const double low = static_cast<double>(args.low_prec_bytes);

  EleutherResult r;
  r.params = 2.0 * v * h + h * s + 8.0 * h * l + 2.0 * h +
             2.0 * (1.0 + args.kv_size_ratio) * l * h * h +
             static_cast<double>(args.num_mlp_linears) * l * h * args.ffn_expansion_factor * h;
  r.model_bytes =
      r.params * low / static_cast<double>(args.tensor_parallel_size * args.pipeline_parallel_size);
  if (args.zero_stage == 3) r.model_bytes /= n;
  r.gradient_bytes = r.params * static_cast<double>(args.bytes_per_grad);
  if (args.zero_stage >= 2) r.gradient_bytes /= n;
  r.optimizer_bytes = r.params * static_cast<double>(args.optimizer_bytes);
  if (args.zero_stage >= 1) r.optimizer_bytes /= n;
  if (args.num_gpus > 1) {
    if (args.zero_stage >= 1) r.communication_bytes += 5e8 * 2.0;
    if (args.zero_stage == 3) r.communication_bytes += 1e9 * 2.0;
  }
  const double attention_term = args.checkpoint_activations ? 0.0 : (2.0 * low + 1.0) * a * s / h;
  r.activation_bytes = s * b * h * l * ((16.0 * low + 2.0) + attention_term);
  if (args.partition_activations) {
    r.activation_bytes /= static_cast<double>(args.tensor_parallel_size);
  }
  r.misc_bytes = args.misc_mem_gib * kGiB;
  r.total_bytes = r.model_bytes + r.gradient_bytes + r.optimizer_bytes + r.communication_bytes +
                  r.activation_bytes + r.misc_bytes;
  return r;
}

}  // namespace fragscope::estimator::reference
