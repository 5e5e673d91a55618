#!/usr/bin/env python3
"""What fragscope's observe hook costs per event, before and after a change, in one call (the
validation's observecost step): bench/gpu_history_overhead of two packs, alternated (before,
after, before, after: the host's drift falls on both alike), or of one pack several times; the
host CPU's share without the GPU (bench/observe_tracker_benchmark of the after pack, where packed:
an empty tracker, PyTorch's history ring and observe's callback on LibTorch's own TraceEntry, and
that callback with a module context set, what naming who holds the memory adds); and
`perf record -g` of the after build's observe run, where perf exists and may record.

    observe_cost.py OUT_DIR --after PACK [--before PACK] [--pairs 2] [--rounds 2] [--no-perf]

Each PACK is a directory from tests/gpu/pack_prebuilt.sh (bin/gpu_history_overhead, hooks/,
syslibs/) or a build directory (bench/gpu_history_overhead). Writes OUT_DIR/observe_cost.md: per
workload, the ns per event that PyTorch's recorder without stacks adds and that observe adds,
before and after, against native; and, where the binary measures them side by side with its
tracker attached (toggled round by round), what observe and the history ring each add over the
idle tracker: the target's comparison (observe at most the ring). Each figure is the median over
the runs; the runs' JSON; perf_observe.txt
(`perf report --stdio`, symbols over 0.5 %). Exit 0 when every run gave figures (the target is
reported, not enforced); "skipped: ..." and 0 when a pack has no gpu_history_overhead or the
machine no CUDA device (the binary says so).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile


def binary(pack):
    for rel in ("bin/gpu_history_overhead", "bench/gpu_history_overhead"):
        path = os.path.join(pack, rel)
        if os.access(path, os.X_OK):
            return path
    return None


def env_for(pack):
    """LD_LIBRARY_PATH with this pack's own libraries first (two packs' hooks must not mix)."""
    env = dict(os.environ)
    own = [os.path.join(pack, d) for d in ("hooks", "syslibs")]
    env["LD_LIBRARY_PATH"] = ":".join(own + [env.get("LD_LIBRARY_PATH", "")]).rstrip(":")
    return env


def run(label, pack, out_dir, index, rounds, timeout):
    """One gpu_history_overhead run; (its JSON or None, output text)."""
    path = os.path.join(out_dir, f"{label}_{index}.json")
    log_dir = tempfile.mkdtemp()
    cmd = [binary(pack), "--rounds", str(rounds), "--json", path, "--log-dir", log_dir]
    try:
        p = subprocess.run(cmd, env=env_for(pack), capture_output=True, text=True,
                           timeout=timeout)
        text = p.stdout + p.stderr
    except subprocess.TimeoutExpired:
        text = f"timed out after {timeout}s"
    shutil.rmtree(log_dir, ignore_errors=True)
    with open(os.path.join(out_dir, f"{label}_{index}.txt"), "w") as f:
        f.write(f"$ {' '.join(cmd)}\n{text}")
    return (json.load(open(path)) if os.path.exists(path) else None), text


def added_ns(result, setting, base="native"):
    """{workload: ns per event that `setting` adds to `base`} of one run."""
    rows = {(r["setting"], r["workload"]): r for r in result["results"]}
    out = {}
    for (s, w), r in rows.items():
        if s == setting and (base, w) in rows:
            out[w] = (r["median_ns"] - rows[(base, w)]["median_ns"]) / r["events_per_op"]
    return out


def median_of(runs, setting, base="native"):
    """{workload: the median over `runs` of what `setting` adds to `base`}."""
    per = {}
    for r in runs:
        for w, ns in added_ns(r, setting, base).items():
            per.setdefault(w, []).append(ns)
    return {w: statistics.median(v) for w, v in per.items()}


def table(before, after):
    """Markdown rows: workload, history (no stacks) and observe (before, after) +ns/event against
    native; then observe and the ring over the idle tracker, side by side (after)."""
    def cell(values, w):
        return f"{values[w]:+.0f}" if w in values else "n/a"

    history = median_of(before + after, "history")
    obs_before, obs_after = median_of(before, "observe"), median_of(after, "observe")
    observe_side = median_of(after, "observe", "tracker_idle")
    ring_side = median_of(after, "tracker_history", "tracker_idle")
    md = ["| workload | PyTorch recorder, no stacks (+ns/event) | observe before | observe after "
          "| tracker attached: observe after / ring, over the idle tracker | observe <= ring |",
          "|---|---|---|---|---|---|"]
    for w in history:
        met = "n/a"
        if w in observe_side and w in ring_side:
            met = "yes" if observe_side[w] <= ring_side[w] else "no"
        md.append(f"| {w} | {history[w]:+.0f} | {cell(obs_before, w)} | {cell(obs_after, w)} | "
                  f"{cell(observe_side, w)} / {cell(ring_side, w)} | {met} |")
    return md


def host_cpu(pack, out_dir, timeout):
    """bench/observe_tracker_benchmark of the pack on the last core; a markdown line."""
    exe = os.path.join(pack, "bench", "observe_tracker_benchmark")
    if not os.access(exe, os.X_OK):
        return "- host CPU share: no bench/observe_tracker_benchmark in the pack"
    path = os.path.join(out_dir, "observe_tracker_benchmark.json")
    cmd = [exe, "--benchmark_min_time=0.3", "--benchmark_repetitions=3",
           "--benchmark_report_aggregates_only=true", f"--benchmark_out={path}",
           "--benchmark_out_format=json"]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", str(os.cpu_count() - 1)] + cmd
    try:
        subprocess.run(cmd, env=env_for(pack), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"- host CPU share: timed out after {timeout}s"
    if not os.path.exists(path):
        return "- host CPU share: the benchmark wrote no figures"
    names = {"0": "empty tracker", "1": "history ring", "2": "observe", "3": "the converter",
             "4": "converter + writer", "5": "observe with a module context"}
    cells = []
    for b in json.load(open(path))["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        parts = dict(p.split(":") for p in b["run_name"].split("/")[1:])
        mix = "random mix" if parts.get("random") == "1" else "warm pair"
        # An iteration is three entries (an alloc and its two free entries); CPU time, in ns.
        cells.append(f"{names.get(parts.get('sink'), '?')} {mix} {b['cpu_time'] / 3:.1f}")
    return ("- host CPU, ns per trace entry (observe_tracker_benchmark, medians of 3, "
            f"`{' '.join(cmd[:3]) if cmd[0] == 'taskset' else 'no taskset'}`): " + "; ".join(cells))


def perf(after, out_dir, timeout):
    """perf record -g of one observe run of the after build; a line for the report."""
    if shutil.which("perf") is None:
        return "- perf: not installed on this machine"
    data = os.path.join(out_dir, "perf.data")
    log_dir = tempfile.mkdtemp()
    cmd = ["perf", "record", "-g", "-F", "2999", "-o", data, "--", binary(after), "--rounds", "1",
           "--log-dir", log_dir]
    try:
        p = subprocess.run(cmd, env=env_for(after), capture_output=True, text=True,
                           timeout=timeout)
        ok = p.returncode == 0 and os.path.exists(data)
        why = (p.stderr or p.stdout).strip().splitlines()[-1:] if not ok else ""
    except subprocess.TimeoutExpired:
        ok, why = False, f"timed out after {timeout}s"
    shutil.rmtree(log_dir, ignore_errors=True)
    if not ok:
        return f"- perf record failed: {why}"
    report = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children",
                             "--sort", "dso,symbol", "--percent-limit", "0.5"],
                            capture_output=True, text=True, timeout=timeout)
    with open(os.path.join(out_dir, "perf_observe.txt"), "w") as f:
        f.write(report.stdout + report.stderr)
    os.remove(data)
    return "- perf: perf_observe.txt (the after build's observe run, symbols over 0.5 %)"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--after", required=True, help="the pack or build with the change")
    p.add_argument("--before", help="the pack or build without it")
    p.add_argument("--pairs", type=int, default=2, help="before/after runs, alternated")
    p.add_argument("--rounds", type=int, default=2, help="gpu_history_overhead --rounds")
    p.add_argument("--no-perf", action="store_true")
    p.add_argument("--timeout", type=int, default=90, help="per run, seconds")
    a = p.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    packs = [("after", a.after)] + ([("before", a.before)] if a.before else [])
    for label, pack in packs:
        if binary(pack) is None:
            print(f"skipped: no gpu_history_overhead in {pack} ({label})")
            return 0
    runs = {"before": [], "after": []}
    ok = True
    for i in range(a.pairs):
        for label, pack in reversed(packs):  # before first in each pair
            result, text = run(label, pack, a.out_dir, i, a.rounds, a.timeout)
            skip = next((ln for ln in text.splitlines() if ln.startswith("skipped: ")), None)
            if skip:
                print(skip)
                return 0
            if result is None:
                ok = False
                print(f"{label} run {i} gave no figures: {text.strip()[-300:]}")
            else:
                runs[label].append(result)
    md = [f"Observe's cost per event, `gpu_history_overhead --rounds {a.rounds}`, {a.pairs} "
          f"run(s) per build alternated; before {a.before or '(not given)'}, after {a.after}.",
          ""]
    if runs["after"]:
        md += table(runs["before"], runs["after"])
        md += ["", host_cpu(a.after, a.out_dir, a.timeout)]
    if not a.no_perf and runs["after"]:
        md += ["", perf(a.after, a.out_dir, a.timeout)]
    text = "\n".join(md) + "\n"
    with open(os.path.join(a.out_dir, "observe_cost.md"), "w") as f:
        f.write(text)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
