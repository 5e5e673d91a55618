#!/usr/bin/env python3
"""The facts and the summary of a GPU validation run (scripts/gpu_validate.sh).

    summary.py env OUT_DIR PACK_DIR     # OUT_DIR/env.json: GPU, driver, torch, date, commit
    summary.py write OUT_DIR            # OUT_DIR/summary.md from env.json, steps.tsv and the
                                        # steps' own outputs

steps.tsv (written by gpu_validate.sh) has one line per step: name, status (ok, FAILED rc=N,
TIMEOUT, skipped, not run), seconds, and the step's directory.
"""
import glob
import json
import os
import platform
import re
import subprocess
import sys
import time

MB = 1_000_000  # the "under 1 MB" criterion for artifacts


def command(cmd):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        return p.stdout.strip() if p.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        return ""


def env(out_dir, pack_dir):
    facts = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "host": platform.node(),
             "cpus": os.cpu_count(), "python": platform.python_version()}
    commit = command(["git", "rev-parse", "HEAD"])
    if commit:
        dirty = command(["git", "status", "--porcelain", "--untracked-files=no"])
        facts["commit"] = commit + (" (with uncommitted changes)" if dirty else "")
    info = os.path.join(pack_dir, "BUILD_INFO")
    if os.path.exists(info):
        facts["pack"] = open(info).read().strip()
        if "commit" not in facts:
            m = re.search(r"^commit (.*)$", facts["pack"], re.M)
            facts["commit"] = m.group(1) if m else "unknown"
    facts.setdefault("commit", "unknown (no git checkout and no BUILD_INFO in the pack)")
    try:
        import torch

        facts["torch"] = torch.__version__
        facts["torch_cuda"] = torch.version.cuda
        facts["cuda_available"] = torch.cuda.is_available()
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            facts["gpu"] = props.name
            facts["gpu_total_memory"] = props.total_memory
    except Exception as e:  # noqa: BLE001 - record why, the steps report their own failures
        facts["torch"] = f"does not import: {e}"
        facts["cuda_available"] = False
    try:
        import transformers

        facts["transformers"] = transformers.__version__
    except Exception:  # noqa: BLE001
        facts["transformers"] = "not installed"
    facts["driver"] = command(["nvidia-smi", "--query-gpu=driver_version",
                               "--format=csv,noheader"]) or "(no nvidia-smi)"
    with open(os.path.join(out_dir, "env.json"), "w") as f:
        json.dump(facts, f, indent=1)
    print(json.dumps(facts))
    return 0


def read(path, default=""):
    return open(path).read() if os.path.exists(path) else default


def section_tests(d):
    log = read(os.path.join(d, "step.log")).splitlines()
    lines = [line for line in log if line.startswith("rc=")]
    closing = [line for line in log if re.match(r"^\d+ passed, \d+ failed", line)]
    failed = [line for line in lines if not line.startswith("rc=0 ")]
    out = [closing[-1] if closing else
           f"{len(lines) - len(failed)} of {len(lines)} test processes exited 0.", ""]
    out += [f"- {line}" for line in lines]
    if not lines:  # a build directory: ctest's own summary
        out += [line for line in log if "tests passed" in line or "Failed" in line]
    return out


def section_oracle(d):
    out = ["| trace | snapshot size | < 1 MB | `fragscope verify` |", "|---|---|---|---|"]
    for pickle in sorted(glob.glob(os.path.join(d, "gpt2_*.pickle"))):
        name = os.path.basename(pickle)[:-len(".pickle")]
        size = os.path.getsize(pickle)
        verdict = read(os.path.join(d, f"verify_{name}.txt"), "(not run)").strip()
        first = verdict.splitlines()[0] if verdict else "(empty)"
        out.append(f"| {name} | {size / MB:.2f} MB | {'yes' if size < MB else 'NO'} | "
                   f"{first} |")
    for path in sorted(glob.glob(os.path.join(d, "verify_*.txt"))):
        text = read(path)
        if "diverged" in text:
            out += ["", f"`{os.path.basename(path)}`:", "", "```", text.strip(), "```"]
    return out


def section_file(d, name):
    text = read(os.path.join(d, name)).strip()
    return text.splitlines() if text else [f"(no {name})"]


SECTIONS = [
    ("tests", "1. GPU tests (tests/gpu/run_prebuilt.sh)", section_tests),
    ("oracle", "2. Oracle traces and fidelity (GPT-2 small, 12 layers)", section_oracle),
    ("modes", "3. The three modes in a real job", lambda d: section_file(d, "modes.md")),
    ("oom", "4. A real fragmentation OOM, explained and fixed",
     lambda d: section_file(d, "oom.md")),
    ("bench", "5. Hot path side by side (bench/gpu_allocator_comparison)",
     lambda d: section_file(d, "bench.md")),
    ("estimator", "6. Estimator accuracy", lambda d: section_file(d, "accuracy.md")),
    ("predict", "7. Prediction accuracy (python -m fragscope predict vs the GPU)",
     lambda d: section_file(d, "predict_accuracy.md")),
    ("bigjob", "8. A larger job failing by fragmentation: verdict and rerun",
     lambda d: section_file(d, "big_job.md")),
    ("pools", "9. Private pools: oracle traces and fidelity",
     lambda d: section_file(d, "pools.md")),
    ("observecost", "10. Observe's cost per event, before and after",
     lambda d: section_file(d, "observe_cost.md")),
    ("wheel", "11. The installed wheel in the modes job", lambda d: section_file(d, "modes.md")),
    ("parallel", "12. One rank of FSDP2 / DDP against predict --parallel",
     lambda d: section_file(d, "parallel.md")),
]


def write(out_dir):
    facts = json.load(open(os.path.join(out_dir, "env.json")))
    steps = {}
    for line in read(os.path.join(out_dir, "steps.tsv")).splitlines():
        name, status, seconds, _ = (line.split("\t") + ["", "", ""])[:4]
        steps[name] = (status, seconds)
    md = ["# fragscope GPU validation", ""]
    if not facts.get("cuda_available"):
        md.append("- gpu: none (no CUDA device): the GPU steps were skipped")
    for key in ("gpu", "gpu_total_memory", "driver", "torch", "torch_cuda", "transformers",
                "python", "date", "commit", "host", "cpus"):
        if key in facts:
            md.append(f"- {key}: {facts[key]}")
    if "pack" in facts:
        md.append("- pack: " + facts["pack"].replace("\n", "; "))
    md += ["", "| step | status | seconds |", "|---|---|---|"]
    # The steps this run was asked for (GPU_VALIDATE_STEPS); all of them for an empty steps.tsv.
    sections = [s for s in SECTIONS if s[0] in steps] or SECTIONS
    for name, title, _ in sections:
        status, seconds = steps.get(name, ("not run", ""))
        md.append(f"| {title} | {status} | {seconds} |")
    for name, title, render in sections:
        status, _ = steps.get(name, ("not run", ""))
        md += ["", f"## {title}", "", f"Status: {status}", ""]
        d = os.path.join(out_dir, name)
        if os.path.isdir(d) and not status.startswith("not run"):
            md += render(d)
            tail = read(os.path.join(d, "step.log")).strip().splitlines()
            if status.startswith(("FAILED", "TIMEOUT")) and tail:
                md += ["", "Last lines of step.log:", "", "```"] + tail[-15:] + ["```"]
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"wrote {os.path.join(out_dir, 'summary.md')}")
    return 0


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "env":
        return env(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "")
    if len(sys.argv) == 3 and sys.argv[1] == "write":
        return write(sys.argv[2])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
