#!/usr/bin/env python3
"""Estimator accuracy on the GPU (the validation's estimator step): measured torch.cuda.max_memory_allocated()
of real training against `fragscope estimate --activation-model torch-autocast`, random
initialization, fused AdamW, bf16 autocast, SDPA attention. Derivation models (GPT-2 124M and
355M, a 1.1B Llama of TinyLlama's shape; two sequence lengths each), whose saved tensors the
formula was written from, and holdout models measured only after it was fixed (GPT-2 at another
shape, GPT-2 with PyTorch's tanh GeLU, a 0.29B Mistral-like model with GQA).

    estimator_accuracy.py all OUT_DIR --fragscope BIN [--timeout 150]   # measure + table
    estimator_accuracy.py measure MODEL OUT.json                         # one model (a child)
    estimator_accuracy.py table OUT_DIR --fragscope BIN                  # table from OUT_DIR

What is compared (the mapping of PyTorch AMP onto the estimator's terms):
- model states: measured = the bytes of the parameter, gradient and AdamW state tensors right
  after optimizer.step() (each storage once, rounded to 512 B); estimated = the estimator's
  gradients + master_weights + optimizer_states terms (under autocast the fp32 parameters are
  the master weights). "other live" is what else was allocated before a forward (cuBLAS
  workspaces), against the estimator's --workspace-mib line.
- total: measured = max_memory_allocated() over the last two of three steps (optimizer states
  exist); estimated = the estimator's device total with --cuda-context-mib 0 (the allocator does
  not see the CUDA context): weights (autocast's 16-bit copies, saved for the backward), master
  weights, optimizer states, activations, the loss's backward, the workspace; the gradients are
  not at the peak (zero_grad(set_to_none=True), the default).
Writes OUT_DIR/<model>.json (measurements), <model>.config.json (the Hugging Face config the
estimator reads), <model>.seq<S>.estimate.json, and accuracy.md: the rows of estimator/README.md's
"Measured accuracy" table. Exit status 0 when every model was measured and estimated (the targets
are reported, not enforced), 1 otherwise; "skipped: no CUDA device" and 0 without a GPU.
"""
import argparse
import json
import os
import subprocess
import sys
import time

# name: (kind, config kwargs, micro-batch, sequence lengths, estimator flags, role). Role
# "derivation": its saved tensors (activation_probe.py) are what autocast_activations.h's formula
# was written from; "holdout": measured only after the formula was fixed, to test it.
LLAMA_1B = {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
            "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000,
            "max_position_embeddings": 2048, "tie_word_embeddings": False}
MISTRAL_03B = {"hidden_size": 1024, "intermediate_size": 3584, "num_hidden_layers": 16,
               "num_attention_heads": 16, "num_key_value_heads": 8, "vocab_size": 32000,
               "max_position_embeddings": 4096, "tie_word_embeddings": False}
GPT2_SMALL = {"n_layer": 12, "n_embd": 768, "n_head": 12}
MODELS = {
    "gpt2-124m": ("gpt2", GPT2_SMALL, 8, (512, 1024), [], "derivation"),
    "gpt2-355m": ("gpt2", {"n_layer": 24, "n_embd": 1024, "n_head": 16}, 8, (512, 1024), [],
                  "derivation"),
    "llama-1.1b": ("llama", LLAMA_1B, 4, (1024, 2048), ["--no-dropout"], "derivation"),
    "gpt2-124m-b4": ("gpt2", GPT2_SMALL, 4, (768,), [], "holdout"),
    "gpt2-124m-atengelu": ("gpt2", dict(GPT2_SMALL, activation_function="gelu_pytorch_tanh"), 8,
                           (512,), [], "holdout"),
    "mistral-0.3b": ("mistral", MISTRAL_03B, 4, (2048,), ["--no-dropout"], "holdout"),
}
# Two cuBLAS workspaces of 32 MiB (Hopper's default), one per handle: the forward's thread and
# autograd's backward thread. Measured: allocated bytes before a forward minus parameters and
# AdamW states (the "other" column of the table).
WORKSPACE_MIB = 64
STATE_TERMS = ("gradients", "main_gradients", "master_weights", "optimizer_states")
BLOCK = 512  # the caching allocator's rounding
GIB = float(1 << 30)


def make_config(name):
    kind, kwargs = MODELS[name][:2]
    if kind == "gpt2":
        from transformers import GPT2Config

        return GPT2Config(vocab_size=50257, n_positions=1024, attn_implementation="sdpa",
                          **kwargs)
    if kind == "mistral":
        from transformers import MistralConfig

        return MistralConfig(attn_implementation="sdpa", **kwargs)
    from transformers import LlamaConfig

    return LlamaConfig(attn_implementation="sdpa", **kwargs)


def state_bytes(model, opt):
    """Bytes of the model states: parameters, gradients and optimizer state tensors on the GPU,
    each storage once, rounded up as the caching allocator rounds."""
    seen, total = set(), 0
    tensors = []
    for p in model.parameters():
        tensors += [p, p.grad]
    for state in opt.state.values():
        tensors += list(state.values())
    for t in tensors:
        if t is None or not hasattr(t, "untyped_storage") or not t.is_cuda:
            continue
        st = t.untyped_storage()
        if st.data_ptr() in seen:
            continue
        seen.add(st.data_ptr())
        total += -(-st.nbytes() // BLOCK) * BLOCK
    return total


def measure(name, out):
    import torch

    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 0
    from transformers import AutoModelForCausalLM

    config = make_config(name)
    config.to_json_file(out[:-len(".json")] + ".config.json")
    batch, seqs = MODELS[name][2:4]
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config)
    model.train()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    result = {"model": name, "parameters": params, "batch": batch, "runs": [],
              "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    for seq in seqs:
        run = {"seq": seq}
        for step in range(3):
            if step == 1:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                params_and_states = state_bytes(model, opt)  # no gradients at this point
                run["other_live_bytes"] = torch.cuda.memory_allocated() - params_and_states
            ids = torch.randint(0, config.vocab_size, (batch, seq), device="cuda")
            t0 = time.perf_counter()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
            run["model_states_bytes"] = state_bytes(model, opt)
            run["allocated_after_step_bytes"] = torch.cuda.memory_allocated()
            opt.zero_grad(set_to_none=True)
            run["step_seconds"] = time.perf_counter() - t0
            run["loss"] = loss.item()
            del loss, ids
        run["max_allocated_bytes"] = torch.cuda.max_memory_allocated()
        run["max_reserved_bytes"] = torch.cuda.max_memory_reserved()
        result["runs"].append(run)
        print(f"{name} seq {seq}: states {run['model_states_bytes'] / GIB:.3f} GiB, peak "
              f"{run['max_allocated_bytes'] / GIB:.3f} GiB", flush=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    return 0


def estimate(fragscope, config_path, batch, seq, extra, out):
    cmd = [fragscope, "estimate", "--model-json", config_path, "--train", "--precision", "bf16",
           "--optimizer", "adamw", "--seq", str(seq), "--micro-batch", str(batch),
           "--flash-attention", "--activation-model", "torch-autocast", "--cuda-context-mib",
           "0", "--workspace-mib", str(WORKSPACE_MIB), "--json", "-"] + extra
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()}")
    with open(out, "w") as f:
        f.write(p.stdout)
    shown = [os.path.basename(c) if c == config_path else c for c in cmd[1:]]
    return json.loads(p.stdout), " ".join(shown)


def error(estimated, measured):
    return (estimated - measured) / measured


def table(out_dir, fragscope):
    """Markdown rows in estimator/README.md's format, from OUT_DIR's measurements."""
    rows, commands, missing, where = [], [], [], ""
    for name, (_, _, batch, _, extra, role) in MODELS.items():
        path = os.path.join(out_dir, f"{name}.json")
        if not os.path.exists(path):
            missing.append(name)
            continue
        m = json.load(open(path))
        where = where or f"{m['gpu']}, torch {m['torch']}"
        for run in m["runs"]:
            seq = run["seq"]
            est, cmd = estimate(fragscope, path[:-len(".json")] + ".config.json", batch, seq,
                                extra, os.path.join(out_dir, f"{name}.seq{seq}.estimate.json"))
            terms = {t["key"]: t["bytes"] for t in est["terms"]}
            states = sum(terms.get(k, 0) for k in STATE_TERMS)
            total = est["device_total_bytes"]
            e_states = error(states, run["model_states_bytes"])
            e_total = error(total, run["max_allocated_bytes"])
            other = run.get("other_live_bytes", 0) / (1 << 20)
            rows.append(
                f"| {name} | {role} | {m['parameters']:,} / {est['parameters']:,} | "
                f"{seq} x {batch} | {run['model_states_bytes'] / GIB:.3f} | {states / GIB:.3f} | "
                f"{e_states * 100:+.2f} % {'ok' if abs(e_states) <= 0.02 else 'MISSED'} | "
                f"{other:.1f} | {run['max_allocated_bytes'] / GIB:.3f} | {total / GIB:.3f} | "
                f"{e_total * 100:+.1f} % {'ok' if abs(e_total) <= 0.10 else 'MISSED'} |")
            commands.append(f"fragscope {cmd}")
    header = ("| model | role | parameters (torch / estimator) | seq x micro-batch | model states "
              "measured (GiB) | model states estimated (GiB) | error (target 2 %) | other live "
              "(MiB) | peak measured (GiB) | total estimated (GiB) | error (target 10 %) |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|\n")
    text = f"Measured on {where or '(nothing measured)'}.\n\n" + header + "\n".join(rows) + "\n"
    text += "\nEstimator commands (the config JSON is the model's own `config.json`):\n\n"
    text += "".join(f"    {c}\n" for c in commands)
    for name in missing:
        text += f"\nNOT MEASURED: {name} (see {name}.log)\n"
    with open(os.path.join(out_dir, "accuracy.md"), "w") as f:
        f.write(text)
    print(text)
    return 1 if missing else 0


def run_all(out_dir, fragscope, timeout):
    os.makedirs(out_dir, exist_ok=True)
    for name in MODELS:
        out = os.path.join(out_dir, f"{name}.json")
        t0 = time.time()
        with open(os.path.join(out_dir, f"{name}.log"), "w") as log:
            try:
                rc = subprocess.run([sys.executable, os.path.abspath(__file__), "measure", name,
                                     out], stdout=log, stderr=subprocess.STDOUT,
                                    timeout=timeout).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        print(f"{name}: rc={rc} {time.time() - t0:.1f}s", flush=True)
        if rc == 0 and not os.path.exists(out):
            print("skipped: no CUDA device")
            return 0
    return table(out_dir, fragscope)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["all", "measure", "table"])
    parser.add_argument("args", nargs="+")
    parser.add_argument("--fragscope", default="build/fragscope")
    parser.add_argument("--timeout", type=int, default=150)
    a = parser.parse_args()
    if a.what == "measure":
        return measure(a.args[0], a.args[1])
    if a.what == "table":
        return table(a.args[0], a.fragscope)
    return run_all(a.args[0], a.fragscope, a.timeout)


if __name__ == "__main__":
    sys.exit(main())
