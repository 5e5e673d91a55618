#!/usr/bin/env python3
"""Markdown tables for bench/run_suite.sh, from the JSON the benchmarks write.

  suite_tables.py gbench FILE.json          Google Benchmark --benchmark_out JSON: one row per
                                            benchmark (the median when repetitions ran)
  suite_tables.py overhead FILE.json        BM_WarmPairLogged/N against BM_WarmPair/N (CPU time)
  suite_tables.py sweep NAME FILE.json      `fragscope sweep --json`: peak reserved / peak
                                            allocated for each configuration of trace NAME

Google Benchmark writes rate counters raw: a counter flagged kIsRate | kInvert (ns_per_op,
per_event) is stored in seconds. Such counters, named "*per_*" but not "*per_second" and below
0.01, are shown in ns; counters already in ns (e.g. ns_per_event, 27.1) are far above that.
"""
import json
import sys

STANDARD_KEYS = {
    "name", "family_index", "per_family_instance_index", "run_name", "run_type", "repetitions",
    "repetition_index", "threads", "iterations", "real_time", "cpu_time", "time_unit",
    "aggregate_name", "aggregate_unit", "label", "error_occurred", "error_message",
}
TIME_UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def fmt_count(value):
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def fmt_ns(ns):
    if ns >= 1e9:
        return f"{ns / 1e9:.3g} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.3g} ms"
    if ns >= 1e4:
        return f"{ns / 1e3:.3g} us"
    return f"{ns:.1f} ns"


def fmt_bytes(n):
    for scale, suffix in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= scale:
            return f"{n / scale:.2f} {suffix}"
    return f"{n} B"


def fmt_counter(name, value):
    if name == "items_per_second":
        return f"{fmt_count(value)}/s"
    if name == "bytes_per_second":
        return f"{value / (1 << 30):.2f} GiB/s"
    if "per_" in name and "per_second" not in name and 0 < abs(value) < 0.01:
        return fmt_ns(value * 1e9)
    return fmt_count(value)


def load_gbench(path):
    with open(path) as f:
        data = json.load(f)
    runs = {}  # run name -> {"row": entry, "cv": entry}
    order = []
    for b in data.get("benchmarks", []):
        name = b.get("run_name", b["name"])
        if name not in runs:
            runs[name] = {}
            order.append(name)
        if b.get("run_type") == "aggregate":
            kind = b.get("aggregate_name")
            if kind == "median":
                runs[name]["row"] = b
            elif kind == "cv":
                runs[name]["cv"] = b
        elif "row" not in runs[name] or runs[name]["row"].get("run_type") != "aggregate":
            runs[name]["row"] = b  # single run (the last repetition if not aggregated)
    return data.get("context", {}), [(n, runs[n]) for n in order if "row" in runs[n]]


def gbench_table(path):
    _, runs = load_gbench(path)
    has_cv = any("cv" in r for _, r in runs)
    head = ["benchmark", "CPU time", "wall time"] + (["CV (CPU)"] if has_cv else [])
    head += ["iterations", "counters"]
    lines = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 2) + "|---|"]
    for name, r in runs:
        b = r["row"]
        if b.get("error_occurred"):
            lines.append(f"| {name} | error: {b.get('error_message', '')} |" + " |" * (len(head) - 2))
            continue
        unit = TIME_UNIT_NS[b.get("time_unit", "ns")]
        cells = [name, fmt_ns(b["cpu_time"] * unit), fmt_ns(b["real_time"] * unit)]
        if has_cv:
            cells.append(f"{100 * r['cv']['cpu_time']:.1f} %" if "cv" in r else "")
        cells.append(str(b["iterations"]))
        counters = [f"{k}={fmt_counter(k, v)}" for k, v in b.items()
                    if k not in STANDARD_KEYS and isinstance(v, (int, float))]
        if b.get("label"):
            counters.append(b["label"])
        cells.append(", ".join(counters))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def overhead_table(path):
    _, runs = load_gbench(path)
    cpu = {}
    for name, r in runs:
        b = r["row"]
        if not b.get("error_occurred"):
            cpu[name] = b["cpu_time"] * TIME_UNIT_NS[b.get("time_unit", "ns")]
    lines = ["| size | warm pair | warm pair + .fslog writer | overhead |", "|---|---:|---:|---:|"]
    for name, logged in cpu.items():
        if not name.startswith("BM_WarmPairLogged/"):
            continue
        size = name.split("/", 1)[1]
        plain = cpu.get(f"BM_WarmPair/{size}")
        if plain is None:
            continue
        lines.append(f"| {fmt_bytes(int(size))} | {fmt_ns(plain)} | {fmt_ns(logged)} | "
                     f"{100 * (logged / plain - 1):+.0f} % |")
    return "\n".join(lines)


def sweep_table(name, path):
    with open(path) as f:
        data = json.load(f)
    lines = ["| trace | configuration | peak reserved | peak allocated | reserved / allocated | "
             "OOMs | device mallocs |", "|---|---|---:|---:|---:|---:|---:|"]
    for rank in data.get("ranks", []):
        sweep = rank.get("sweep") or {}
        for i, c in enumerate(sweep.get("configs", [])):
            label = c["label"] + (" [trace]" if c.get("is_trace_config") else "")
            if i == sweep.get("recommended"):
                label = f"**{label}** (recommended)"
            if c.get("error"):
                lines.append(f"| {name} | {label} | error: {c['error']} | | | | |")
                continue
            reserved, allocated = c["peak_reserved_bytes"], c["peak_allocated_bytes"]
            ratio = f"{reserved / allocated:.3f}" if allocated else "-"
            lines.append(f"| {name} | {label} | {fmt_bytes(reserved)} | {fmt_bytes(allocated)} | "
                         f"{ratio} | {c['ooms']} | {c['device_mallocs']} |")
    return "\n".join(lines)


def main(argv):
    if len(argv) == 3 and argv[1] == "gbench":
        print(gbench_table(argv[2]))
    elif len(argv) == 3 and argv[1] == "overhead":
        print(overhead_table(argv[2]))
    elif len(argv) == 4 and argv[1] == "sweep":
        print(sweep_table(argv[2], argv[3]))
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
