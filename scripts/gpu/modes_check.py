#!/usr/bin/env python3
"""The three hook modes in a real job (the validation's modes step): the same seeded GPT-2 training natively,
in replace mode, observe mode and interpose mode (LD_PRELOAD, its observe and cache modes), each
in its own process; then losses, log completeness, stats against the log, and steps/s.

    modes_check.py all OUT_DIR [--steps 50] [--timeout 120]   # every mode, then the report
    modes_check.py child MODE OUT.json --steps N --log PATTERN  # one run (what `all` starts)

Needs PYTHONPATH=hooks/python, FRAGSCOPE_LIB_DIR (the hook libraries) and
FRAGSCOPE_FSLOG_COUNTS (the fslog_counts tool). Writes OUT_DIR/modes.md (the table),
OUT_DIR/modes.json, OUT_DIR/<mode>.json/.log and the .fslog files. Exit status 0 when every mode
ran and every check passed, 1 otherwise; prints "skipped: no CUDA device" and exits 0 without a
GPU.
"""
import argparse
import gc
import glob
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ("native", "replace", "observe", "interpose_observe", "interpose_cache")
WARMUP = 5  # steps left out of steps/s (CUDA init, cuBLAS handles, allocator warm-up)
# Loss tolerance for the one mode that changes more than addresses: with
# PYTORCH_NO_CUDA_MEMORY_CACHING=1 PyTorch's cuBLAS workspace handling differs.
CACHE_MODE_RTOL = 1e-5


def child(mode, out, steps, log_pattern):
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 0
    sys.path.insert(0, HERE)
    import gpt2_job

    mark = None
    if mode != "native":
        import fragscope

        mark = fragscope.mark
        if mode == "replace":
            fragscope.use_allocator(conf="", log=log_pattern)
        elif mode == "observe":
            fragscope.observe(log=log_pattern)
        else:
            want = mode.split("_")[1]
            assert fragscope.preload_mode() == want, (fragscope.preload_mode(), want)
    gpt2_job.deterministic(torch)
    model, config = gpt2_job.build(torch)
    data = gpt2_job.batches(steps, batch=8, vocab=config.vocab_size)
    losses, seconds = gpt2_job.train(torch, model, data, mark=mark)
    # The stats are compared with the whole log, so everything the job allocated is freed first
    # (the model's parameters would otherwise be freed at exit, in the log but after the stats).
    del model
    gc.collect()
    if mode == "native":
        stats = dict(torch.cuda.memory_stats(0))
    else:
        fragscope.flush()
        stats = dict(fragscope.stats(0))
    timed = seconds[WARMUP:]
    result = {"mode": mode, "losses": losses, "step_seconds": seconds,
              "steps_per_s": len(timed) / sum(timed), "stats": stats,
              "seqs": [seq for seq, _ in data]}
    with open(out, "w") as f:
        json.dump(result, f)
    print(f"ok: {mode}: {len(losses)} steps, final loss {losses[-1]:.4f}, "
          f"{result['steps_per_s']:.2f} steps/s")
    return 0


def run_env(mode, lib_dir, log_pattern):
    env = dict(os.environ, CUBLAS_WORKSPACE_CONFIG=":4096:8")
    for key in ("LD_PRELOAD", "FRAGSCOPE_PRELOAD_MODE", "FRAGSCOPE_LOG",
                "PYTORCH_NO_CUDA_MEMORY_CACHING", "PYTORCH_CUDA_ALLOC_CONF"):
        env.pop(key, None)
    if mode.startswith("interpose"):
        env["LD_PRELOAD"] = os.path.join(lib_dir, "libfragscope_preload.so")
        env["FRAGSCOPE_PRELOAD_MODE"] = mode.split("_")[1]
        env["FRAGSCOPE_LOG"] = log_pattern
        if mode == "interpose_cache":
            env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    return env


def log_counts(pattern):
    """fslog_counts of the one log matching pattern (%p, %d -> *), or an error string."""
    files = glob.glob(pattern.replace("%p", "*").replace("%d", "*").replace("%r", "*"))
    if len(files) != 1:
        return None, f"expected one log for {pattern}, found {len(files)}"
    tool = os.environ["FRAGSCOPE_FSLOG_COUNTS"]
    p = subprocess.run([tool, files[0]], capture_output=True, text=True)
    if p.returncode != 0:
        return None, f"{files[0]}: unreadable or incomplete: {p.stderr.strip()}"
    return json.loads(p.stdout), files[0]


def log_checks(mode, counts, stats, steps):
    """(name, expected, got, ok) rows: the log against the stats of the allocator in use."""
    kinds = counts["kinds"]
    rows = [("log read to the end, CRCs ok, no warnings", 0, counts["warnings"],
             counts["warnings"] == 0),
            ("markers (one per step)", steps, len(counts["markers"]),
             len(counts["markers"]) == steps)]
    exact = [("alloc", "allocation.all.allocated"), ("free_requested", "allocation.all.freed"),
             ("segment_alloc", "segment.all.allocated"), ("segment_free", "segment.all.freed")]
    if mode == "interpose_observe":
        # The log holds cudaMalloc calls: PyTorch's segments plus other libraries' buffers.
        for kind, key in exact[2:]:
            rows.append((f"{kind} >= {key}", stats[key], kinds.get(kind, 0),
                         kinds.get(kind, 0) >= stats[key]))
        return rows
    for kind, key in exact:
        rows.append((f"{kind} == {key}", stats[key], kinds.get(kind, 0),
                     kinds.get(kind, 0) == stats[key]))
    rows.append(("requested bytes == requested_bytes.all.allocated",
                 stats["requested_bytes.all.allocated"], counts["alloc_requested_bytes"],
                 counts["alloc_requested_bytes"] == stats["requested_bytes.all.allocated"]))
    return rows


def run_all(out_dir, steps, timeout):
    os.makedirs(out_dir, exist_ok=True)
    lib_dir = os.environ.get("FRAGSCOPE_LIB_DIR", "")
    results, failures = {}, []
    for mode in MODES:
        pattern = os.path.join(out_dir, f"{mode}.%p.%d.fslog")
        out = os.path.join(out_dir, f"{mode}.json")
        cmd = [sys.executable, os.path.abspath(__file__), "child", mode, out, "--steps",
               str(steps), "--log", pattern]
        t0 = time.time()
        with open(os.path.join(out_dir, f"{mode}.log"), "w") as log:
            try:
                rc = subprocess.run(cmd, env=run_env(mode, lib_dir, pattern), stdout=log,
                                    stderr=subprocess.STDOUT, timeout=timeout).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        print(f"{mode}: rc={rc} {time.time() - t0:.1f}s", flush=True)
        if rc == 0 and not os.path.exists(out):
            print("skipped: no CUDA device")
            return 0
        if rc != 0:
            failures.append(f"{mode}: rc={rc} (see {mode}.log)")
            continue
        result = json.load(open(out))
        if mode != "native":
            counts, where = log_counts(pattern)
            result["log"] = where
            if counts is None:
                failures.append(f"{mode}: {where}")
                result["checks"] = [("log complete", "readable", where, False)]
            else:
                result["log_kinds"] = counts["kinds"]
                result["checks"] = log_checks(mode, counts, result["stats"], steps)
        results[mode] = result
    table, more = report(results, steps)
    failures += more
    with open(os.path.join(out_dir, "modes.md"), "w") as f:
        f.write(table)
        for line in failures:
            f.write(f"\nFAILED: {line}\n")
    summary = {m: {k: v for k, v in r.items() if k not in ("stats", "step_seconds")}
               for m, r in results.items()}
    with open(os.path.join(out_dir, "modes.json"), "w") as f:
        json.dump({"steps": steps, "results": summary, "failures": failures}, f, indent=1)
    print(table)
    for line in failures:
        print(f"FAILED: {line}")
    return 1 if failures else 0


def report(results, steps):
    """The markdown table of the modes against the native run, and the failed checks."""
    failures = []
    native = results.get("native")
    lines = [f"GPT-2 small (124M, random init), batch 8, seq in {{128..512}}, bf16 autocast, "
             f"AdamW, {steps} steps, deterministic algorithms; steps/s over steps "
             f"{WARMUP}..{steps - 1}.", "",
             "| mode | losses vs native | max abs loss diff | steps/s | vs native | log events "
             "| log vs stats |", "|---|---|---|---|---|---|---|"]
    for mode in MODES:
        r = results.get(mode)
        if r is None:
            lines.append(f"| {mode} | did not run | | | | | |")
            continue
        same, diff = "(reference)", ""
        if native is not None and mode != "native":
            d = max(abs(a - b) for a, b in zip(r["losses"], native["losses"]))
            diff = f"{d:.3g}"
            if r["losses"] == native["losses"]:
                same = "bit-identical"
            else:
                tol = CACHE_MODE_RTOL if mode == "interpose_cache" else 0.0
                ok = all(abs(a - b) <= tol * max(1.0, abs(b))
                         for a, b in zip(r["losses"], native["losses"]))
                same = f"within {tol:g} rel" if ok else "DIFFERENT"
                if not ok:
                    failures.append(f"{mode}: losses differ from native (max {diff})")
        speed = f"{r['steps_per_s']:.2f}"
        ratio = f"{r['steps_per_s'] / native['steps_per_s']:.3f}x" if native else ""
        events, verdict = "", ""
        if "checks" in r:
            events = str(sum(r.get("log_kinds", {}).values()))
            bad = [c for c in r["checks"] if not c[3]]
            verdict = f"{len(r['checks']) - len(bad)}/{len(r['checks'])} ok"
            for name, want, got, _ in bad:
                verdict += f"; {name}: want {want}, got {got}"
                failures.append(f"{mode}: {name}: want {want}, got {got}")
        lines.append(f"| {mode} | {same} | {diff} | {speed} | {ratio} | {events} | {verdict} |")
    return "\n".join(lines) + "\n", failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["all", "child"])
    parser.add_argument("args", nargs="+")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--timeout", type=int, default=120)
    parser.add_argument("--log", default="")
    a = parser.parse_args()
    if a.what == "child":
        return child(a.args[0], a.args[1], a.steps, a.log)
    return run_all(a.args[0], a.steps, a.timeout)


if __name__ == "__main__":
    sys.exit(main())
