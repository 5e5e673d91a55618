#include "cli/estimate_flags.h"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace fragscope::cli::estimate {

const CommandSpec& EstimateCommand() {
  static const CommandSpec spec{
      .name = "estimate",
      .synopsis = "(--preset NAME | --model-json PATH | --params N) [--train] [options]",
      .description =
          R"txt(Per-GPU theoretical memory of training or inference, term by term (bytes, GiB, share), against a
GPU. Every term's formula, values and source: --explain. Units: bytes; GiB = 2^30 bytes.)txt",
      .flags =
          {{"--preset", "NAME", "built-in architecture (--list-presets)", "Model"},
           {"--model-json", "PATH",
            "model spec JSON: fragscope's schema or a Hugging Face config.json", "Model"},
           {"--params", "N",
            "parameter count (7e9, 6.7B, 125M); with a model: replaces its count; alone: a bare "
            "count, without the architecture that activations and the KV cache need: they are left "
            "out (a note says so) unless a flag asks for them (--seq, --context, ...)",
            "Model"},
           {"--train", "", "training (default: inference)", "Mode"},
           {"--infer", "", "inference", "Mode"},
           {"--tp", "N", "tensor parallel size (default 1)", "Parallelism"},
           {"--pp", "N", "pipeline parallel size (default 1)", "Parallelism"},
           {"--dp", "N", "data parallel size (default 1)", "Parallelism"},
           {"--ep", "N", "expert parallel size, divides --dp (MoE)", "Parallelism"},
           {"--vpp", "N", "virtual pipeline stages per rank (interleaved 1F1B)", "Parallelism"},
           {"--sp", "", "sequence parallelism", "Parallelism"},
           {"--microbatches", "N", "micro-batches per step (default: >= pp)", "Parallelism"},
           {"--pp-rank", "R",
            "torch-autocast: the pipeline rank to estimate, 0 to pp - 1 (default 0)",
            "Parallelism"},
           {"--pp-schedule", "NAME",
            "torch-autocast: gpipe, 1f1b (default) or interleaved-1f1b (--vpp 2 unless given)",
            "Parallelism"},
           {"--precision", "fp32|fp16|bf16",
            "default bf16 (16-bit = mixed precision with fp32 master weights)", "Training"},
           {"--grads", "16bit|fp32|16bit+fp32",
            "gradient buffers under mixed precision (default fp32)", "Training"},
           {"--optimizer", "NAME",
            "adam, adamw (default), adam8bit, sgd, sgd-momentum, adafactor; torch.optim's may "
            "end -for-loop, -foreach or -fused (adamw-fused)",
            "Training"},
           {"--optimizer-impl", "for-loop|foreach|fused",
            "torch.optim's implementation (default foreach, PyTorch's for CUDA parameters)",
            "Training"},
           {"--zero", "0|1|2|3", "DeepSpeed ZeRO stage (default 0)", "Training"},
           {"--distributed-optimizer", "", "Megatron's distributed optimizer (ZeRO-1 over dp)",
            "Training"},
           {"--offload-optimizer", "", "ZeRO-Offload: gradients, master weights, states on the CPU",
            "Training"},
           {"--offload-params", "", "ZeRO-3 parameter offload (needs --zero 3 --offload-optimizer)",
            "Training"},
           {"--seq", "N", "sequence length (default 2048)", "Training"},
           {"--micro-batch", "N", "micro-batch size (default 1)", "Training"},
           {"--recompute", "none|selective|full", "activation recomputation (default none)",
            "Training"},
           {"--flash-attention", "", "no s^2 attention tensors are stored (default: they are)",
            "Training"},
           {"--no-dropout", "",
            "no dropout masks (default: dropout, as Korthikanti assumes) (the report's second line "
            "states both, with the recompute)",
            "Training"},
           {"--no-activations", "", "model states only", "Training"},
           {"--activation-model", "NAME",
            "korthikanti (default: Megatron's fused kernels) or torch-autocast (transformers' "
            "eager modules under torch.autocast, no recompute: one GPU, measured on an H100; "
            "torchtitan's tp (with --sp) and pp ranks, and LoRA/QLoRA of Llama-family models, "
            "read from fragscope's predictor: estimator/README.md)",
            "Training"},
           {"--persistent-grads", "", "torch-autocast: gradients live at the peak (accumulation)",
            "Training"},
           {"--lora-rank", "R", "LoRA with rank R (frozen base)", "Training"},
           {"--lora-targets", "LIST", "q,k,v,o,gate,up,down or all (default q,v)", "Training"},
           {"--qlora", "", "NF4 base weights (QLoRA)", "Training"},
           {"--no-double-quant", "", "QLoRA without double quantization", "Training"},
           {"--dtype", "NAME", "weights: fp32, fp16, bf16 (default), fp8, int8, int4", "Inference"},
           {"--kv-dtype", "NAME", "KV cache dtype (default bf16)", "Inference"},
           {"--autocast", "NAME",
            "the forward's autocast dtype over --dtype weights (fp32 weights under bf16)",
            "Inference"},
           {"--batch", "N", "concurrent sequences (default 1)", "Inference"},
           {"--context", "N", "tokens per sequence in the KV cache (default 2048)", "Inference"},
           {"--prompt", "N", "prefill tokens for the timing (default: --context)", "Inference"},
           {"--overhead-factor", "X",
            "the EleutherAI 1.2x rule, as its own line (default 1.2; 1 = off)", "Inference"},
           {"--mfu", "X", "roofline compute efficiency in (0, 1] (default 1, the ideal bound)",
            "Inference"},
           {"--bw-efficiency", "X",
            "roofline bandwidth efficiency in (0, 1] (default 1, the ideal bound)", "Inference"},
           {"--gpu", "NAME", "a100-40gb, a100-80gb, h100-80gb, h200, rtx-4090 (--list-gpus)",
            "GPU and fixed overheads"},
           {"--gpu-mem-gib", "X", "GPU capacity in GiB (overrides the preset's)",
            "GPU and fixed overheads"},
           {"--cuda-context-mib", "X",
            "CUDA context line (default 526.8 MiB, measured; see README)",
            "GPU and fixed overheads"},
           {"--workspace-mib", "X", "cuBLAS/cuDNN/NCCL workspace line (default 0)",
            "GPU and fixed overheads"},
           {"--solve", "KIND",
            "max-batch: largest micro-batch (training) or batch (inference) that fits\nmax-seq: "
            "largest sequence length (training) or context (inference)\nmin-gpus: smallest GPU "
            "count, scaling one dimension of the layout",
            "Inverse questions (need --gpu or --gpu-mem-gib)"},
           {"--scale", "dp|tp|pp", "dimension scaled by min-gpus (default dp; tp for inference)",
            "Inverse questions (need --gpu or --gpu-mem-gib)"},
           {"--json", "PATH",
            "the report as JSON, written to PATH (after the text report) or, with PATH -, to "
            "stdout "
            "instead of the text",
            "Output"},
           {"--explain", "", "every formula with its values substituted and its source", "Output"},
           {"--list-presets", "", "the built-in models, with their parameter counts", "Output"},
           {"--list-gpus", "", "the GPU presets", "Output"}},
  };
  return spec;
}

absl::StatusOr<Flags> ParseFlags(const std::vector<std::string>& args) {
  absl::StatusOr<ParsedFlags> parsed = cli::ParseFlags(args, EstimateCommand());
  if (!parsed.ok()) return parsed.status();
  if (!parsed->positional.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", parsed->positional[0], "' (flags start with --)"));
  }
  Flags flags;
  if (parsed->help) flags.switches["help"] = true;
  for (const FlagSpec& f : EstimateCommand().flags) {
    const std::string* value = parsed->Get(f.name);
    if (value == nullptr) continue;
    const std::string name(f.name.substr(2));
    if (f.value.empty()) {
      flags.switches[name] = true;
    } else {
      flags.values[name] = *value;
    }
  }
  return flags;
}

absl::Status BadValue(absl::string_view flag, absl::string_view value, absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid value '", value, "' for --", flag, ": expected ", want));
}

absl::Status ReadInt(const Flags& flags, const std::string& name, int64_t minimum, int64_t& field) {
  const std::optional<std::string> value = flags.Value(name);
  if (!value) return absl::OkStatus();
  int64_t parsed = 0;
  if (!absl::SimpleAtoi(*value, &parsed) || parsed < minimum) {
    return BadValue(name, *value,
                    minimum > 0 ? "a positive integer" : absl::StrCat("an integer >= ", minimum));
  }
  field = parsed;
  return absl::OkStatus();
}

absl::Status ReadDouble(const Flags& flags, const std::string& name, double minimum, double maximum,
                        double& field) {
  const std::optional<std::string> value = flags.Value(name);
  if (!value) return absl::OkStatus();
  double parsed = 0;
  if (!absl::SimpleAtod(*value, &parsed) || !std::isfinite(parsed) || parsed < minimum ||
      parsed > maximum) {
    return BadValue(name, *value, absl::StrFormat("a number in [%g, %g]", minimum, maximum));
  }
  field = parsed;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ParseCount(absl::string_view text) {
  std::string body(text);
  double multiplier = 1;
  if (!body.empty()) {
    switch (absl::ascii_tolower(static_cast<unsigned char>(body.back()))) {
      case 'k':
        multiplier = 1e3;
        break;
      case 'm':
        multiplier = 1e6;
        break;
      case 'b':
      case 'g':
        multiplier = 1e9;
        break;
      case 't':
        multiplier = 1e12;
        break;
      default:
        break;
    }
    if (multiplier != 1) body.pop_back();
  }
  double value = 0;
  if (!absl::SimpleAtod(body, &value) || !std::isfinite(value) || value * multiplier < 1 ||
      value * multiplier > 9e15) {
    return BadValue("params", text, "a positive count such as 7e9, 6.7B or 125M");
  }
  return static_cast<int64_t>(std::llround(value * multiplier));
}

absl::Status ForFlag(absl::string_view flag, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", status.message()));
}

std::string ShowFieldsAsFlags(absl::string_view message) {
  for (const FlagSpec& f : EstimateCommand().flags) {
    if (f.value.empty()) continue;
    const absl::string_view name(f.name.data() + 2, f.name.size() - 2);
    if (absl::StartsWith(message, absl::StrCat(name, " = "))) return absl::StrCat("--", message);
  }
  return std::string(message);
}

}  // namespace fragscope::cli::estimate
