#include "analysis/demo_workload.h"

#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fragscope {
namespace {

constexpr uint64_t kBf16 = 2;
constexpr uint64_t kFp32 = 4;

using Role = AllocationRole;

class Builder {
 public:
  uint64_t Alloc(uint64_t bytes, Role role, std::string module, std::string op) {
    ops_.push_back({.kind = WorkloadOp::Kind::kAlloc,
                    .id = next_id_,
                    .bytes = bytes,
                    .holder = {.role = role,
                               .module = std::move(module),
                               .op = std::move(op),
                               .backward = backward_}});
    return next_id_++;
  }
  void set_backward(bool backward) { backward_ = backward; }
  void Free(uint64_t id) { ops_.push_back({WorkloadOp::Kind::kFree, id, 0, {}}); }
  void Mark(WorkloadPhase phase, std::string text) {
    ops_.push_back({WorkloadOp::Kind::kMark, 0, 0, std::move(text), phase});
  }
  std::vector<WorkloadOp> Take() { return std::move(ops_); }

 private:
  std::vector<WorkloadOp> ops_;
  uint64_t next_id_ = 1;
  bool backward_ = false;
};

// The module of each parameter tensor of LayerParameterCounts, under "transformer.h.<l>".
constexpr const char* kLayerParameterModules[] = {
    "ln_1", "ln_1", "attn.c_attn", "attn.c_attn", "attn.c_proj", "attn.c_proj",
    "ln_2", "ln_2", "mlp.c_fc",    "mlp.c_fc",    "mlp.c_proj",  "mlp.c_proj"};

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
  std::vector<std::string> param_modules = {"transformer.wte", "transformer.wpe"};
  for (int l = 0; l < c.layers; ++l) {
    const std::vector<uint64_t> counts = LayerParameterCounts(h);
    for (size_t i = 0; i < counts.size(); ++i) {
      param_counts.push_back(counts[i]);
      param_modules.push_back(absl::StrCat("transformer.h.", l, ".", kLayerParameterModules[i]));
    }
  }
  param_counts.push_back(h);
  param_counts.push_back(h);
  param_modules.push_back("transformer.ln_f");
  param_modules.push_back("transformer.ln_f");
  b.Mark(WorkloadPhase::kInit, "init / weights");
  for (size_t i = 0; i < param_counts.size(); ++i) {
    b.Alloc(param_counts[i] * kBf16, Role::kWeights, param_modules[i], "aten::empty");
  }

  std::vector<uint64_t> grads, master, exp_avg, exp_avg_sq;  // persistent after step 0 but grads
  for (int step = 0; step < c.steps; ++step) {
    const auto s = static_cast<uint64_t>(c.seq_lens[rng() % c.seq_lens.size()]);
    const uint64_t bsh = batch * s * h * kBf16;
    b.Mark(WorkloadPhase::kForward, absl::StrCat("step ", step, " / forward (seq ", s, ")"));
    b.set_backward(false);
    const Role kSaved = Role::kSavedActivations;
    const Role kTemp = Role::kTemporaries;
    const uint64_t input_ids = b.Alloc(batch * s * 8, kSaved, "", "aten::_to_copy");
    uint64_t hidden = b.Alloc(bsh, kSaved, "transformer.wte", "aten::embedding");
    std::vector<std::vector<uint64_t>> saved(static_cast<size_t>(c.layers));
    for (int l = 0; l < c.layers; ++l) {
      auto& keep = saved[static_cast<size_t>(l)];
      const std::string m = absl::StrCat("transformer.h.", l);
      keep.push_back(b.Alloc(bsh, kSaved, m + ".ln_1", "aten::native_layer_norm"));
      keep.push_back(b.Alloc(3 * bsh, kSaved, m + ".attn.c_attn", "aten::addmm"));
      if (!c.flash_attention) {
        keep.push_back(b.Alloc(batch * heads * s * s * kBf16, kSaved, m + ".attn", "aten::bmm"));
        keep.push_back(
            b.Alloc(batch * heads * s * s * kBf16, kSaved, m + ".attn", "aten::_softmax"));
      } else {
        keep.push_back(b.Alloc(batch * heads * s * kFp32, kSaved, m + ".attn",
                               "aten::_scaled_dot_product_flash_attention"));
      }
      keep.push_back(b.Alloc(bsh, kSaved, m + ".attn", "aten::bmm"));
      const uint64_t attn_proj = b.Alloc(bsh, kTemp, m + ".attn.c_proj", "aten::addmm");
      const uint64_t residual1 = b.Alloc(bsh, kTemp, m, "aten::add");
      b.Free(attn_proj);
      keep.push_back(b.Alloc(bsh, kSaved, m + ".ln_2", "aten::native_layer_norm"));
      keep.push_back(b.Alloc(4 * bsh, kSaved, m + ".mlp.c_fc", "aten::addmm"));
      keep.push_back(b.Alloc(4 * bsh, kSaved, m + ".mlp.act", "aten::gelu"));
      const uint64_t mlp_out = b.Alloc(bsh, kTemp, m + ".mlp.c_proj", "aten::addmm");
      const uint64_t residual2 = b.Alloc(bsh, kSaved, m, "aten::add");
      b.Free(mlp_out);
      b.Free(residual1);
      keep.push_back(hidden);  // the layer input is saved for backward
      hidden = residual2;
    }
    const uint64_t logits = b.Alloc(batch * s * vocab * kBf16, kSaved, "lm_head", "aten::mm");
    const uint64_t logits_fp32 =  // the loss's upcast
        b.Alloc(batch * s * vocab * kFp32, kTemp, "GPT2LMHeadModel", "aten::_to_copy");
    const uint64_t loss = b.Alloc(4, kTemp, "GPT2LMHeadModel", "aten::nll_loss_forward");
    b.Free(logits_fp32);

    b.Mark(WorkloadPhase::kBackward, absl::StrCat("step ", step, " / backward"));
    b.set_backward(true);
    // Gradients are created during backward and dropped after the optimizer step
    // (zero_grad(set_to_none=True)), so they too are reallocated every step.
    uint64_t grad_hidden = b.Alloc(bsh, kTemp, "lm_head", "aten::mm");
    b.Free(logits);
    b.Free(loss);
    b.Free(hidden);
    for (int l = c.layers - 1; l >= 0; --l) {
      auto& keep = saved[static_cast<size_t>(l)];
      const std::string m = absl::StrCat("transformer.h.", l);
      const std::vector<uint64_t> counts = LayerParameterCounts(h);
      for (size_t i = 0; i < counts.size(); ++i) {
        grads.push_back(b.Alloc(counts[i] * kBf16, Role::kGradients,
                                absl::StrCat(m, ".", kLayerParameterModules[i]), "aten::mm"));
      }
      const uint64_t grad_fc = b.Alloc(4 * bsh, kTemp, m + ".mlp.c_proj", "aten::mm");
      const uint64_t grad_gelu = b.Alloc(4 * bsh, kTemp, m + ".mlp.act", "aten::gelu_backward");
      b.Free(grad_fc);
      uint64_t grad_scores = 0;
      if (!c.flash_attention) {
        grad_scores = b.Alloc(batch * heads * s * s * kBf16, kTemp, m + ".attn",
                              "aten::_softmax_backward_data");
      }
      const uint64_t grad_qkv = b.Alloc(3 * bsh, kTemp, m + ".attn", "aten::bmm");
      if (grad_scores != 0) b.Free(grad_scores);
      b.Free(grad_gelu);
      const uint64_t next_grad =
          b.Alloc(bsh, kTemp, m + ".ln_1", "aten::native_layer_norm_backward");
      b.Free(grad_qkv);
      b.Free(grad_hidden);
      grad_hidden = next_grad;
      for (uint64_t id : keep) b.Free(id);
    }
    b.Free(grad_hidden);
    b.Free(input_ids);
    const std::pair<uint64_t, const char*> outer[] = {{vocab * h, "transformer.wte"},
                                                      {1024 * h, "transformer.wpe"},
                                                      {h, "transformer.ln_f"},
                                                      {h, "transformer.ln_f"}};
    for (const auto& [n, module] : outer) {
      grads.push_back(b.Alloc(n * kBf16, Role::kGradients, module, "aten::mm"));
    }

    b.Mark(WorkloadPhase::kOptimizer, absl::StrCat("step ", step, " / optimizer"));
    b.set_backward(false);
    if (master.empty()) {
      for (size_t i = 0; i < param_counts.size(); ++i) {
        const uint64_t n = param_counts[i];
        master.push_back(
            b.Alloc(n * kFp32, Role::kOptimizerStates, param_modules[i], "aten::_to_copy"));
        exp_avg.push_back(
            b.Alloc(n * kFp32, Role::kOptimizerStates, param_modules[i], "aten::zeros_like"));
        exp_avg_sq.push_back(
            b.Alloc(n * kFp32, Role::kOptimizerStates, param_modules[i], "aten::zeros_like"));
      }
    }
    // Per parameter: an fp32 gradient copy and an update temporary.
    for (size_t i = 0; i < param_counts.size(); ++i) {
      const uint64_t n = param_counts[i];
      const Role role = Role::kOptimizerTemporaries;
      const uint64_t g32 = b.Alloc(n * kFp32, role, param_modules[i], "aten::_to_copy");
      const uint64_t update = b.Alloc(n * kFp32, role, param_modules[i], "aten::addcdiv");
      b.Free(update);
      b.Free(g32);
    }
    for (uint64_t id : grads) b.Free(id);
    grads.clear();
  }
  return b.Take();
}

}  // namespace fragscope
