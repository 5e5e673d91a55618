#!/usr/bin/env python3
"""Does the estimate say where a real training job fits? (`fragscope analyze --model`)

GPT-2 small (transformers, random init, SDPA, bf16 autocast, fused AdamW, seq 1024, micro-batch
16, 3 steps, markers "step N / forward|backward|optimizer") under PyTorch's native allocator,
observed by fragscope, with the process capped (set_per_process_memory_fraction) at 0.9x and at
1.1x the estimator's torch-autocast peak (`fragscope estimate ... --activation-model
torch-autocast --cuda-context-mib 0 --workspace-mib 64`). Each observed log is then analyzed with
`--model gpt2-small:...,activations=torch-autocast`, so the report compares what was allocated at
an OOM with the theoretical footprint.

    model_oom_check.py OUT_DIR --fragscope BIN          # parent: estimate, two runs, analyses
    model_oom_check.py run OUT.json FACTOR LOG          # child: one capped run

Writes OUT_DIR/model_oom.md and each run's .json, log and analysis .txt. Exit 0 when both runs
ran and were analyzed (the outcome is reported, not enforced); "skipped: no CUDA device" without
a GPU.
"""
import glob
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SEQ, BATCH, STEPS = 1024, 16, 3
MODEL = f"gpt2-small:seq={SEQ},micro_batch={BATCH},flash=1,activations=torch-autocast"
GIB = float(1 << 30)


def estimate_bytes(fragscope):
    cmd = [fragscope, "estimate", "--preset", "gpt2-small", "--train", "--seq", str(SEQ),
           "--micro-batch", str(BATCH), "--flash-attention", "--activation-model",
           "torch-autocast", "--cuda-context-mib", "0", "--workspace-mib", "64", "--json", "-"]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True,
                                     text=True).stdout)["device_total_bytes"]


def child(out, allowed, log):
    import torch

    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 0
    import fragscope
    from transformers import GPT2Config, GPT2LMHeadModel

    fragscope.observe(log=log)
    total = torch.cuda.get_device_properties(0).total_memory
    fraction = allowed / total
    torch.cuda.set_per_process_memory_fraction(fraction, 0)
    result = {"allowed_bytes": allowed, "fraction": fraction, "capacity_bytes": total,
              "completed": False, "oom": None, "steps_done": 0}
    try:
        fragscope.mark("init / weights")
        torch.manual_seed(0)
        config = GPT2Config(attn_implementation="sdpa")
        with torch.device("cuda"):
            model = GPT2LMHeadModel(config)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        for step in range(STEPS):
            ids = torch.randint(0, config.vocab_size, (BATCH, SEQ), device="cuda")
            fragscope.mark(f"step {step} / forward")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
            fragscope.mark(f"step {step} / backward")
            loss.backward()
            fragscope.mark(f"step {step} / optimizer")
            opt.step()
            opt.zero_grad(set_to_none=True)
            del loss, ids
            result["steps_done"] = step + 1
        torch.cuda.synchronize()
        result["completed"] = True
    except torch.OutOfMemoryError as e:
        result["oom"] = str(e).splitlines()[0][:300]
    stats = torch.cuda.memory_stats(0)
    result["peak_allocated"] = stats["allocated_bytes.all.peak"]
    result["peak_reserved"] = stats["reserved_bytes.all.peak"]
    fragscope.flush()
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    return 0


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "run":
        return child(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    out_dir, fragscope = sys.argv[1], sys.argv[sys.argv.index("--fragscope") + 1]
    os.makedirs(out_dir, exist_ok=True)
    est = estimate_bytes(fragscope)
    md = [f"GPT-2 small, seq {SEQ} x micro-batch {BATCH}, {STEPS} steps; estimated peak "
          f"(torch-autocast) {est / GIB:.3f} GiB.", ""]
    ok = True
    for factor in (0.9, 1.1):
        name = f"cap{int(factor * 100)}"
        out = os.path.join(out_dir, f"{name}.json")
        log = os.path.join(out_dir, f"{name}.%p.%d.fslog")
        p = subprocess.run([sys.executable, __file__, "run", out, str(int(est * factor)), log],
                           capture_output=True, text=True, timeout=150)
        if "skipped: no CUDA device" in p.stdout:
            print("skipped: no CUDA device")
            return 0
        if not os.path.exists(out):
            ok = False
            md.append(f"- cap {factor}x: no result (exit {p.returncode}): {p.stderr[-500:]}")
            continue
        r = json.load(open(out))
        what = ("completed" if r["completed"] else
                f"**OOM** after {r['steps_done']} steps: {r['oom']}")
        md.append(f"- cap {factor}x the estimate ({r['allowed_bytes'] / GIB:.2f} GiB): {what}; "
                  f"peak allocated {r['peak_allocated'] / GIB:.3f} GiB, peak reserved "
                  f"{r['peak_reserved'] / GIB:.3f} GiB")
        logs = glob.glob(os.path.join(out_dir, f"{name}.*.fslog"))
        if len(logs) != 1:
            ok = False
            md.append(f"  - expected one log, found {len(logs)}")
            continue
        cmd = [fragscope, "analyze", logs[0], "--no-sweep", "--no-summary", "--model", MODEL,
               "--memory-fraction", repr(r["fraction"]), "--capacity", str(r["capacity_bytes"])]
        a = subprocess.run(cmd, capture_output=True, text=True)
        with open(os.path.join(out_dir, f"{name}_analyze.txt"), "w") as f:
            f.write(f"$ {' '.join(cmd)}\n{a.stdout}{a.stderr}")
        ok = ok and a.returncode == 0
        lines = a.stdout.splitlines()
        md += [f"  - {line.strip()}" for line in lines if "cause:" in line]
        if any(line.startswith("Model (") for line in lines):  # the --model section, joined
            start = next(i for i, line in enumerate(lines) if line.startswith("Model ("))
            end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip()),
                       len(lines))
            md.append("  - " + lines[start].strip() + ": " +
                      " ".join(line.strip() for line in lines[start + 1:end]))
    text = "\n".join(md) + "\n"
    with open(os.path.join(out_dir, "model_oom.md"), "w") as f:
        f.write(text)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
