#!/usr/bin/env python3
"""A torch.compile'd job recorded on the GPU against its prediction (the validation's compile
step): GPT-2 124M's width in four layers, `model = torch.compile(model)` (inductor, mode
"default"; the kinds ending in -ro with mode "reduce-overhead", CUDA graph trees), trained with
fused AdamW under bf16 autocast (train_job.py's loop) and run for inference (no_grad forward, as
predict_hf's), each observed by fragscope.observe() and diffed (`fragscope diff`: peaks, each
phase's allocations) against `python -m fragscope predict --config ... --compile
[--compile-mode reduce-overhead]`. The first step compiles, and its kernels' first launches
time their launch configs (predicted); compilation itself allocates on the device only for
pad_mm's timing, which the predictor assumes does not pad.

    compile_check.py all OUT_DIR --fragscope BIN [--dry-run] [--timeout S]
    compile_check.py child KIND OUT.json LOG [--dry-run]
    # KIND: training, inference, training-ro, inference-ro

--dry-run (no GPU): the "measured" runs are the same loops on fragscope's simulated device, so
that the loops, the compile, the command lines and the diffs run on a CPU (measured and
predicted then agree exactly). Writes OUT_DIR/compile.md and compile.json. Exit 0 when both runs
were measured, predicted and diffed (and, in a dry run, agree); "skipped: no CUDA device" and 0
without a GPU and without --dry-run.
"""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import contexts_check  # noqa: E402
import train_job  # noqa: E402
from predict_accuracy import commit, delta, gpu_key  # noqa: E402

# Four layers of GPT-2 124M: the prediction compiles on the host's CPU in one thread (a 12-layer
# model's forward and backward took 219 s on two busy cores), and four layers show the fusions.
JOB = dict(config=dict(train_job.GPT2_124M, n_layer=4), seq=512, micro_batch=8, steps=3)
DRY_JOB = dict(config=dict(train_job.GPT2_124M, n_layer=1, n_embd=128, n_head=4,
                           vocab_size=2048), seq=64, micro_batch=2, steps=2)
KINDS = ("training", "inference", "training-ro", "inference-ro")


def mode(kind):
    """torch.compile's mode of a kind."""
    return "reduce-overhead" if kind.endswith("-ro") else "default"


def child(kind, out, log, dry_run):
    import torch

    if not dry_run and not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 0
    job = DRY_JOB if dry_run else JOB
    vocab = train_job.hf_config(job["config"]).vocab_size
    start = time.perf_counter()
    with contexts_check.device(log, dry_run) as mark:
        mark("init / weights")
        model, opt = train_job.build(job["config"])
        if kind.startswith("inference"):
            model.eval()
            opt = None
        model = torch.compile(model, mode=mode(kind))
        shapes = [(job["seq"], job["micro_batch"])] * job["steps"]
        if kind.startswith("training"):
            train_job.train(model, opt, vocab, shapes, mark)
        else:
            for step, (seq, batch) in enumerate(shapes):
                ids = torch.randint(0, vocab, (batch, seq), device="cuda")
                mark(f"step {step} / forward")
                with torch.autocast("cuda", dtype=torch.bfloat16), torch.no_grad():
                    # What is measured is the forward; its output is freed as the call returns
                    # (nothing is allocated until the next step's input ids).
                    model(input_ids=ids, use_cache=False)
                del ids
        if not dry_run:
            torch.cuda.synchronize()
        mark("end")
        del model, opt
    with open(out, "w") as f:
        json.dump({"kind": kind, "seconds": time.perf_counter() - start}, f)
    return 0


def compare(a, script, job, kinds, flags, title, name, unavailable=lambda kind: None):
    """A comparison step's parent (compile, adapters): each kind's job run by `script`'s child
    (observed on the GPU, or on the simulated device with --dry-run), predicted by `python -m
    fragscope predict` with `flags(kind)` after the job's shape, and diffed; a kind for which
    `unavailable(kind)` gives a reason is skipped with it. Writes OUT_DIR/NAME.md and NAME.json
    (write); exit 1 when a run, prediction or (dry run) agreement failed."""
    import torch

    if not a.dry_run and not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 0
    os.makedirs(a.out_dir, exist_ok=True)
    p = contexts_check.Parent(a)
    gpu = "h100-80gb" if a.dry_run else gpu_key(torch.cuda.get_device_name())
    config = p.path(f"{name}.config.json")
    with open(config, "w") as f:
        json.dump(job["config"], f)
    rows, checks, wanted = {}, [], 0
    for kind in kinds:
        reason = unavailable(kind)
        if reason:
            checks.append((True, f"{kind} skipped: {reason}"))
            print(f"{kind} skipped: {reason}")
            continue
        wanted += 1
        log = p.path(f"{kind}.fslog")
        args = [sys.executable, script, "child", kind, p.path(f"{kind}.json"), log]
        rc, text = p.call(f"{kind}.run", args + (["--dry-run"] if a.dry_run else []), a.timeout)
        if rc != 0:
            checks.append((False, f"{kind}: the run ended with exit {rc}: {text.strip()[-300:]}"))
            continue
        predicted = p.path(f"{kind}.predicted.fslog")
        try:
            p.json_of(f"{kind}.predict", [
                sys.executable, "-m", "fragscope", "predict", "--config", config, "--seq",
                str(job["seq"]), "--micro-batch", str(job["micro_batch"]), "--steps",
                str(job["steps"]), "--attention", "sdpa", *flags(kind), "--gpu", gpu,
                "--json", "--out", predicted])
            rows[kind] = p.diff(f"{kind}.diff", log, predicted)
        except RuntimeError as e:
            checks.append((False, str(e)))
            continue
        if a.dry_run:
            c = rows[kind]
            same = all(c["a_figures"][k] == c["b_figures"][k]
                       for k in ("peak_allocated_bytes", "peak_reserved_bytes", "allocations"))
            checks.append((same, f"{kind}: the job on the simulated device and `predict "
                                 f"{' '.join(flags(kind))}` agree (peaks, allocations)"))
    write(a, gpu, rows, checks, title, name)
    return 1 if any(not ok for ok, _ in checks) or len(rows) < wanted else 0


def flags(kind):
    """The predict flags of a kind's job."""
    job = (["--optimizer", "adamw-fused"] if kind.startswith("training")
           else ["--mode", "inference"])
    return ["--compile", *job, "--compile-mode", mode(kind)]


def run_all(a):
    return compare(a, __file__, DRY_JOB if a.dry_run else JOB, KINDS, flags, "torch.compile",
                   "compile")


def write(a, gpu, rows, checks, title, name):
    """OUT_DIR/NAME.md, the measured and predicted figures of each run, and NAME.json."""
    lines = [f"# {title} on {gpu} ({commit()}, {time.strftime('%Y-%m-%d')}"
             f"{', dry run' if a.dry_run else ''})", "",
             "| run | peak allocated measured / predicted | peak reserved measured / predicted "
             "| allocations measured / predicted |", "|---|---|---|---|"]
    for kind, c in rows.items():
        cells = [f"{c['a_figures'][k]} / {c['b_figures'][k]} "
                 f"({delta(c['a_figures'][k], c['b_figures'][k])})"
                 for k in ("peak_allocated_bytes", "peak_reserved_bytes", "allocations")]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    lines += ["", "Where measured and predicted differ (per phase; `fragscope diff`):", ""]
    for kind, c in rows.items():
        lines += [f"- {kind}: {json.dumps(d)[:400]}" for d in c.get("differences", [])[:12]]
    lines += ["", "Checks:", ""] + [f"- {'ok' if ok else 'FAILED'}: {text}"
                                    for ok, text in checks]
    with open(os.path.join(a.out_dir, f"{name}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(a.out_dir, f"{name}.json"), "w") as f:
        json.dump({"gpu": gpu, "rows": rows,
                   "checks": [{"ok": ok, "check": t} for ok, t in checks]}, f)
    print("\n".join(lines))


def main():
    return contexts_check.step_main(__doc__, KINDS, child, run_all, 300)


if __name__ == "__main__":
    sys.exit(main())
