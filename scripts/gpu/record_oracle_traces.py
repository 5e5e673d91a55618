#!/usr/bin/env python3
"""Records oracle traces from PyTorch's native CUDA caching allocator, for fragscope's fidelity
tests and importers. Needs a CUDA GPU and torch (transformers for the GPT-2 traces).

    python3 scripts/gpu/record_oracle_traces.py OUT_DIR [--only micro|gpt2] [--gpt2-layers N]
                                                [--gpt2-steps N] [--gpt2-warmup N]

(defaults: everything; the GPT-2 runs have 4 layers and 4 recorded steps, no warm-up; the
validation script records GPT-2 small's 12 layers over 2 steps after 1 unrecorded warm-up step,
which keeps each snapshot under 1 MB) writes into OUT_DIR:
  env.json                       torch / CUDA / GPU facts
  micro_<name>.json              a seeded raw alloc/free/empty_cache sequence (exact sizes and
                                 streams), the memory_stats() and memory_summary() after it, and
                                 every OOM message it hit
  micro_<name>.pickle            the same run's _dump_snapshot (device_traces without stacks)
  gpt2_<variant>.pickle/.json    a few training steps of a randomly initialized GPT-2-style model
                                 with variable sequence lengths (plain, side stream with
                                 record_stream, tuned allocator settings)
Each configuration runs in its own process because PYTORCH_CUDA_ALLOC_CONF is read at CUDA init.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time

MICRO_CONFIGS = {
    "default": ("", None),
    "max_split_128": ("max_split_size_mb:128", None),
    "roundup4": ("roundup_power2_divisions:4", None),
    "roundup_list": ("roundup_power2_divisions:[64:8,256:4,>:1],max_split_size_mb:256", None),
    "expandable": ("expandable_segments:True", None),
    # A 3 GiB cap makes the same workload hit the retry ladder and OOM.
    "fraction_3g": ("", 3),
    "fraction_3g_gc": ("garbage_collection_threshold:0.6,max_split_size_mb:64", 3),
}
GPT2_VARIANTS = {
    "plain": "",
    "side_stream": "",
    "tuned": "max_split_size_mb:128,roundup_power2_divisions:4",
}


def run_micro(name, out_dir):
    import torch
    conf, cap_gib = MICRO_CONFIGS[name]
    dev = torch.device("cuda:0")
    torch.cuda.init()
    total = torch.cuda.get_device_properties(0).total_memory
    if cap_gib is not None:
        torch.cuda.set_per_process_memory_fraction(cap_gib * 2**30 / total, 0)
    torch.cuda.memory._record_memory_history(enabled="all", context=None, max_entries=10**7)
    side = torch.cuda.Stream()
    streams = [torch.cuda.current_stream(), side]
    rng = random.Random(1234)
    ops, live, ooms = [], {}, []
    next_id = 0
    for step in range(3000):
        r = rng.random()
        if r < 0.55 or not live:
            size = int(2 ** rng.uniform(0, 28)) + 1
            s = rng.randrange(2)
            try:
                ptr = torch.cuda.caching_allocator_alloc(size, 0, streams[s])
            except torch.OutOfMemoryError as e:
                ooms.append({"step": step, "size": size, "stream": s, "message": str(e)})
                ops.append(["oom", size, s])
                continue
            live[next_id] = ptr
            ops.append(["alloc", next_id, size, s, ptr])
            next_id += 1
        elif r < 0.98:
            k = rng.choice(list(live))
            torch.cuda.caching_allocator_delete(live.pop(k))
            ops.append(["free", k])
        else:
            torch.cuda.empty_cache()
            ops.append(["empty_cache"])
    stats = torch.cuda.memory_stats(0)
    summary = torch.cuda.memory_summary(0)
    torch.cuda.memory._dump_snapshot(os.path.join(out_dir, f"micro_{name}.pickle"))
    torch.cuda.memory._record_memory_history(enabled=None)
    with open(os.path.join(out_dir, f"micro_{name}.json"), "w") as f:
        json.dump({"conf": conf, "cap_gib": cap_gib, "device_total": total,
                   "stream_handles": [int(s.cuda_stream) for s in streams], "ops": ops,
                   "memory_stats": stats, "memory_summary": summary, "ooms": ooms}, f)
    for p in live.values():
        torch.cuda.caching_allocator_delete(p)


def run_gpt2(variant, out_dir, layers=4, recorded_steps=4, warmup=0):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    rng = random.Random(0)
    cfg = GPT2Config(n_layer=layers, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024)
    model = GPT2LMHeadModel(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    side = torch.cuda.Stream()
    steps = []
    for step in range(warmup + recorded_steps):
        if step == warmup:  # the trace starts with the model and optimizer states in place
            torch.cuda.memory._record_memory_history(enabled="all", context=None,
                                                     max_entries=10**7)
        seq = rng.choice([96, 160, 256, 384, 512])
        batch = 4
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(ids, labels=ids).loss
        loss.backward()
        if variant == "side_stream":
            # Gradients consumed on a side stream, as a bucketed all-reduce would.
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for p in model.parameters():
                    if p.grad is not None:
                        p.grad.record_stream(side)
                        p.grad.mul_(1.0)
            torch.cuda.current_stream().wait_stream(side)
        opt.step()
        opt.zero_grad(set_to_none=True)
        steps.append({"seq": seq, "loss": float(loss), "recorded": step >= warmup,
                      "max_allocated": torch.cuda.max_memory_allocated(),
                      "max_reserved": torch.cuda.max_memory_reserved()})
    torch.cuda.synchronize()
    torch.cuda.memory._dump_snapshot(os.path.join(out_dir, f"gpt2_{variant}.pickle"))
    with open(os.path.join(out_dir, f"gpt2_{variant}.json"), "w") as f:
        json.dump({"conf": GPT2_VARIANTS[variant], "layers": layers, "steps": steps,
                   "memory_stats": torch.cuda.memory_stats(0)}, f)


def main():
    parser = argparse.ArgumentParser(description="Records oracle traces (see the module doc).")
    parser.add_argument("out_dir")
    parser.add_argument("--only", choices=["micro", "gpt2"], default=None)
    parser.add_argument("--gpt2-layers", type=int, default=4)
    parser.add_argument("--gpt2-steps", type=int, default=4, help="recorded steps")
    parser.add_argument("--gpt2-warmup", type=int, default=0, help="steps before recording")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "NAME"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    out_dir = args.out_dir
    if args.child:
        kind, name = args.child
        if kind == "micro":
            run_micro(name, out_dir)
        else:
            run_gpt2(name, out_dir, args.gpt2_layers, args.gpt2_steps, args.gpt2_warmup)
        return 0
    os.makedirs(out_dir, exist_ok=True)
    import torch
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 0
    props = torch.cuda.get_device_properties(0)
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": props.name,
           "total_memory": props.total_memory, "date": time.strftime("%Y-%m-%d"),
           "driver": subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                                     "--format=csv,noheader"], capture_output=True,
                                    text=True).stdout.strip()}
    with open(os.path.join(out_dir, "env.json"), "w") as f:
        json.dump(env, f, indent=1)
    print(env, flush=True)
    failures = 0
    jobs = []
    if args.only in (None, "micro"):
        jobs += [("micro", n, MICRO_CONFIGS[n][0]) for n in MICRO_CONFIGS]
    if args.only in (None, "gpt2"):
        jobs += [("gpt2", v, GPT2_VARIANTS[v]) for v in GPT2_VARIANTS]
    shape = ["--gpt2-layers", str(args.gpt2_layers), "--gpt2-steps", str(args.gpt2_steps),
             "--gpt2-warmup", str(args.gpt2_warmup)]
    for kind, name, conf in jobs:
        t0 = time.time()
        e = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=conf)
        rc = subprocess.run([sys.executable, __file__, out_dir, "--child", kind, name] + shape,
                            env=e).returncode
        print(f"{kind} {name} conf='{conf}': rc={rc} {time.time() - t0:.1f}s", flush=True)
        failures += rc != 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
