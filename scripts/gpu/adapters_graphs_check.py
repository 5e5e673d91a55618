#!/usr/bin/env python3
"""LoRA, QLoRA and a CUDA-graphed forward recorded on the GPU against their predictions (the
validation's adapters step), each observed by fragscope.observe() and diffed (`fragscope diff`:
peaks, each phase's allocations) against `python -m fragscope predict` of the same job:

  - lora: a 4-layer TinyLlama-width model built in bf16, peft's LoRA (get_peft_model, r=8,
    alpha=8, peft's default targets q_proj and v_proj), fused AdamW over the trainable
    parameters, trained under bf16 autocast (train_job.py's loop), against `predict --lora`;
  - qlora: the same over a base loaded in 4 bits (from_pretrained of a random checkpoint with
    BitsAndBytesConfig NF4, double quantization, bf16 compute), against `predict --qlora`.
    Skipped, with the reason, where bitsandbytes' CUDA kernels cannot run (not installed, or
    its 4-bit quantization fails on the device);
  - graphs: the same model's inference forward (fp32 weights, bf16 autocast, no_grad) as the
    PyTorch docs graph a whole network: warmed up 3 times on a side stream, captured once with
    torch.cuda.graph into its private pool, replayed each step after copying the step's batch
    into the static input, against `predict --mode inference --cuda-graphs`.

    adapters_graphs_check.py all OUT_DIR --fragscope BIN [--dry-run] [--timeout S]
    adapters_graphs_check.py child KIND OUT.json LOG [--dry-run]   # KIND: lora, qlora, graphs

--dry-run (no GPU): the "measured" runs are the same jobs on fragscope's simulated device (QLoRA's
4-bit load by the predictor's own loader, which needs bitsandbytes' Python package), so that the
jobs, the command lines and the diffs run on a CPU (measured and predicted then agree exactly).
Writes OUT_DIR/adapters.md and adapters.json. Exit 0 when every run not skipped was measured,
predicted and diffed (and, in a dry run, agrees); "skipped: no CUDA device" and 0 without a GPU
and without --dry-run.
"""
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compile_check  # noqa: E402
import contexts_check  # noqa: E402
import train_job  # noqa: E402

JOB = dict(config=dict(train_job.TINYLLAMA_1B, num_hidden_layers=4), seq=512, micro_batch=4,
           steps=3)
DRY_JOB = dict(config=contexts_check.DRY_GENERATE["config"], seq=32, micro_batch=2, steps=2)
KINDS = ("lora", "qlora", "graphs")
WARM_UP = 3  # the PyTorch docs' whole-network example (and the predictor's)


def qlora_unavailable(dry_run):
    """Why QLoRA cannot run here (bitsandbytes missing, or its CUDA kernels failing on the
    device), or None. On the GPU this runs in the parent, which fragscope does not observe."""
    from fragscope.predictor import adapters

    reason = adapters.missing("qlora")
    if reason or dry_run:
        return reason
    try:
        import bitsandbytes.functional as functional
        import torch

        weight = torch.ones(64, 64, device="cuda", dtype=torch.bfloat16)
        packed, state = functional.quantize_4bit(weight, quant_type="nf4")
        functional.dequantize_4bit(packed, state, quant_type="nf4")
        torch.cuda.synchronize()
    except Exception as e:  # a missing or mismatched native library, no kernel for the GPU
        return f"bitsandbytes' 4-bit kernels do not run on this GPU: {str(e)[:200]}"
    return None


def checkpoint(cfg, path):
    """A random bf16 checkpoint of `cfg` in `path`, made on the CPU before anything is observed,
    for QLoRA's from_pretrained to quantize as it loads."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).save_pretrained(path)


def base(kind, cfg, ckpt, dry_run):
    """The model as the job loads it: LoRA's base in bf16, QLoRA's in 4 bits, the graphed
    forward's in fp32 (eval)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)

    def build(**options):
        return AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", **options)

    if kind == "graphs":
        with torch.device("cuda"):
            return build().eval()
    if kind == "qlora" and not dry_run:
        from transformers import BitsAndBytesConfig

        quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                   bnb_4bit_use_double_quant=True,
                                   bnb_4bit_compute_dtype=torch.bfloat16)
        return AutoModelForCausalLM.from_pretrained(ckpt, quantization_config=quant,
                                                    dtype=torch.bfloat16, device_map={"": 0},
                                                    attn_implementation="sdpa")
    if kind == "qlora":  # the simulated device: the predictor's 4-bit loader (bnb.py)
        from fragscope.predictor import bnb

        with torch.device("cuda"):
            return bnb.load_4bit(lambda: build(dtype=torch.bfloat16), torch.bfloat16)
    with torch.device("cuda"):
        return build(dtype=torch.bfloat16)


def graphed(model, job, vocab, mark):
    """The inference forward warmed up on a side stream, captured into a CUDA graph and
    replayed once per step (the static input refilled from the host)."""
    import torch

    def forward(ids):
        with torch.autocast("cuda", dtype=torch.bfloat16), torch.no_grad():
            return model(input_ids=ids, use_cache=False).logits

    shape = (job["micro_batch"], job["seq"])
    static_ids = torch.randint(0, vocab, shape, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for k in range(WARM_UP):
            mark(f"warm-up {k} / forward")
            logits = forward(static_ids)
            del logits
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    mark("capture / forward")
    with torch.cuda.graph(graph):
        static_logits = forward(static_ids)
    for step in range(job["steps"]):
        mark(f"step {step} / replay")
        static_ids.copy_(torch.randint(0, vocab, shape))
        graph.replay()
    return graph, static_ids, static_logits


def child(kind, out, log, dry_run):
    import contextlib

    import torch

    if not dry_run and not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 0
    job = DRY_JOB if dry_run else JOB
    cfg = train_job.hf_config(job["config"])
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        ckpt = None
        if kind == "qlora" and not dry_run:
            ckpt = stack.enter_context(tempfile.TemporaryDirectory())
            checkpoint(cfg, ckpt)
        mark = stack.enter_context(contexts_check.device(log, dry_run))
        if kind == "qlora" and dry_run:
            from fragscope.predictor import bnb

            stack.enter_context(bnb.kernels())
        mark("init / weights")
        model = base(kind, cfg, ckpt, dry_run)
        held, opt = (), None
        if kind == "graphs":
            held = graphed(model, job, cfg.vocab_size, mark)
        else:
            from peft import LoraConfig, get_peft_model

            model.train()
            model = get_peft_model(model, LoraConfig(r=8, lora_alpha=8, lora_dropout=0.0,
                                                     task_type="CAUSAL_LM"))
            opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                                    lr=1e-4, fused=True)
            train_job.train(model, opt, cfg.vocab_size,
                            [(job["seq"], job["micro_batch"])] * job["steps"], mark)
        if not dry_run:
            torch.cuda.synchronize()
        mark("end")
        del model, opt, held
    with open(out, "w") as f:
        json.dump({"kind": kind, "seconds": time.perf_counter() - start}, f)
    return 0


def flags(kind):
    """The predict flags of a kind's job (bf16 autocast, as the job runs)."""
    if kind == "graphs":
        return ["--dtype", "bf16", "--mode", "inference", "--cuda-graphs"]
    return ["--dtype", "bf16", "--optimizer", "adamw-fused", f"--{kind}", "--lora-rank", "8"]


def run_all(a):
    return compile_check.compare(
        a, __file__, DRY_JOB if a.dry_run else JOB, KINDS, flags, "LoRA, QLoRA and CUDA graphs",
        "adapters", lambda kind: qlora_unavailable(a.dry_run) if kind == "qlora" else None)


def main():
    return contexts_check.step_main(__doc__, KINDS, child, run_all, 150)


if __name__ == "__main__":
    sys.exit(main())
