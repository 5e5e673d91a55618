#include "analysis/demo_workload.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fragscope {
namespace {

constexpr uint64_t kBf16 = 2;
constexpr uint64_t kFp32 = 4;

class Builder {
 public:
  uint64_t Alloc(uint64_t bytes) {
    ops_.push_back({WorkloadOp::Kind::kAlloc, next_id_, bytes, {}});
    return next_id_++;
  }
  void Free(uint64_t id) { ops_.push_back({WorkloadOp::Kind::kFree, id, 0, {}}); }
  void Mark(WorkloadPhase phase, std::string text) {
    ops_.push_back({WorkloadOp::Kind::kMark, 0, 0, std::move(text), phase});
  }
  std::vector<WorkloadOp> Take() { return std::move(ops_); }

 private:
  std::vector<WorkloadOp> ops_;
  uint64_t next_id_ = 1;
};

// The parameter tensors of one transformer layer: (rows, cols) of each weight and bias.
std::vector<uint64_t> LayerParameterCounts(uint64_t h) {
  return {h,         h,      // ln_1 weight, bias
          h * 3 * h, 3 * h,  // c_attn
          h * h,     h,      // attn c_proj
          h,         h,      // ln_2
          h * 4 * h, 4 * h,  // mlp c_fc
          4 * h * h, h};     // mlp c_proj
}

}  // namespace

uint64_t DemoModelParameters(const DemoWorkloadConfig& c) {
  const auto h = static_cast<uint64_t>(c.hidden);
  uint64_t per_layer = 0;
  for (uint64_t n : LayerParameterCounts(h)) per_layer += n;
  return static_cast<uint64_t>(c.vocab) * h + 1024 * h +
         per_layer * static_cast<uint64_t>(c.layers) + 2 * h;
}

std::string DemoModelRecord(const DemoWorkloadConfig& c) {
  int longest = 0;
  for (int s : c.seq_lens) longest = std::max(longest, s);
  return absl::StrFormat(
      R"({"format": "fragscope.model/1", "config": {"model_type": "gpt2", "n_layer": %d, )"
      R"("n_embd": %d, "n_head": %d, "vocab_size": %d, "n_positions": 1024, "resid_pdrop": 0, )"
      R"("embd_pdrop": 0, "attn_pdrop": 0}, "job": {"mode": "training", "seq": %d, )"
      R"("micro_batch": %d, "dtype": "bf16", "optimizer": "adamw", "attention": "%s", )"
      R"("activations": "korthikanti"}})",
      c.layers, c.hidden, c.heads, c.vocab, longest, c.micro_batch,
      c.flash_attention ? "flash" : "eager");
}

std::vector<WorkloadOp> GenerateDemoWorkload(const DemoWorkloadConfig& c) {
  Builder b;
  std::mt19937_64 rng(c.seed);
  const auto h = static_cast<uint64_t>(c.hidden);
  const auto heads = static_cast<uint64_t>(c.heads);
  const auto vocab = static_cast<uint64_t>(c.vocab);
  const auto batch = static_cast<uint64_t>(c.micro_batch);

  // Parameters: embeddings (token, position), layers, final norm. bf16 weights.
  std::vector<uint64_t> param_counts = {vocab * h, 1024 * h};
  for (int l = 0; l < c.layers; ++l) {
    for (uint64_t n : LayerParameterCounts(h)) param_counts.push_back(n);
  }
  param_counts.push_back(h);
  param_counts.push_back(h);
  b.Mark(WorkloadPhase::kInit, "init / weights");
  for (uint64_t n : param_counts) b.Alloc(n * kBf16);

  std::vector<uint64_t> grads, master, exp_avg, exp_avg_sq;  // persistent after step 0 but grads
  for (int step = 0; step < c.steps; ++step) {
    const auto s = static_cast<uint64_t>(c.seq_lens[rng() % c.seq_lens.size()]);
    const uint64_t bsh = batch * s * h * kBf16;
    b.Mark(WorkloadPhase::kForward, absl::StrCat("step ", step, " / forward (seq ", s, ")"));
    const uint64_t input_ids = b.Alloc(batch * s * 8);
    uint64_t hidden = b.Alloc(bsh);  // embedding output
    std::vector<std::vector<uint64_t>> saved(static_cast<size_t>(c.layers));
    for (int l = 0; l < c.layers; ++l) {
      auto& keep = saved[static_cast<size_t>(l)];
      keep.push_back(b.Alloc(bsh));      // ln_1 output
      keep.push_back(b.Alloc(3 * bsh));  // qkv
      if (!c.flash_attention) {
        keep.push_back(b.Alloc(batch * heads * s * s * kBf16));  // scores
        keep.push_back(b.Alloc(batch * heads * s * s * kBf16));  // softmax probabilities
      } else {
        keep.push_back(b.Alloc(batch * heads * s * kFp32));  // logsumexp
      }
      keep.push_back(b.Alloc(bsh));  // attention output
      const uint64_t attn_proj = b.Alloc(bsh);
      const uint64_t residual1 = b.Alloc(bsh);
      b.Free(attn_proj);
      keep.push_back(b.Alloc(bsh));      // ln_2 output
      keep.push_back(b.Alloc(4 * bsh));  // fc output
      keep.push_back(b.Alloc(4 * bsh));  // gelu output
      const uint64_t mlp_out = b.Alloc(bsh);
      const uint64_t residual2 = b.Alloc(bsh);
      b.Free(mlp_out);
      b.Free(residual1);
      keep.push_back(hidden);  // the layer input is saved for backward
      hidden = residual2;
    }
    const uint64_t logits = b.Alloc(batch * s * vocab * kBf16);
    const uint64_t logits_fp32 = b.Alloc(batch * s * vocab * kFp32);  // loss upcast
    const uint64_t loss = b.Alloc(4);
    b.Free(logits_fp32);

    b.Mark(WorkloadPhase::kBackward, absl::StrCat("step ", step, " / backward"));
    // Gradients are created during backward and dropped after the optimizer step
    // (zero_grad(set_to_none=True)), so they too are reallocated every step.
    uint64_t grad_hidden = b.Alloc(bsh);
    b.Free(logits);
    b.Free(loss);
    b.Free(hidden);
    for (int l = c.layers - 1; l >= 0; --l) {
      auto& keep = saved[static_cast<size_t>(l)];
      for (uint64_t n : LayerParameterCounts(h)) grads.push_back(b.Alloc(n * kBf16));
      const uint64_t grad_fc = b.Alloc(4 * bsh);
      const uint64_t grad_gelu = b.Alloc(4 * bsh);
      b.Free(grad_fc);
      uint64_t grad_scores = 0;
      if (!c.flash_attention) grad_scores = b.Alloc(batch * heads * s * s * kBf16);
      const uint64_t grad_qkv = b.Alloc(3 * bsh);
      if (grad_scores != 0) b.Free(grad_scores);
      b.Free(grad_gelu);
      const uint64_t next_grad = b.Alloc(bsh);
      b.Free(grad_qkv);
      b.Free(grad_hidden);
      grad_hidden = next_grad;
      for (uint64_t id : keep) b.Free(id);
    }
    b.Free(grad_hidden);
    b.Free(input_ids);
    for (uint64_t n : {vocab * h, 1024 * h, h, h}) grads.push_back(b.Alloc(n * kBf16));

    b.Mark(WorkloadPhase::kOptimizer, absl::StrCat("step ", step, " / optimizer"));
    if (master.empty()) {
      for (uint64_t n : param_counts) {
        master.push_back(b.Alloc(n * kFp32));
        exp_avg.push_back(b.Alloc(n * kFp32));
        exp_avg_sq.push_back(b.Alloc(n * kFp32));
      }
    }
    for (uint64_t n : param_counts) {  // per-parameter fp32 gradient copy and update temporary
      const uint64_t g32 = b.Alloc(n * kFp32);
      const uint64_t update = b.Alloc(n * kFp32);
      b.Free(update);
      b.Free(g32);
    }
    for (uint64_t id : grads) b.Free(id);
    grads.clear();
  }
  return b.Take();
}

}  // namespace fragscope
