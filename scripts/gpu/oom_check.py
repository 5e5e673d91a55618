#!/usr/bin/env python3
"""A real fragmentation OOM, explained and fixed (the validation's oom step), around frag_oom_job.py:

  1. the design check: the job's allocation sequence on fragscope's simulated device (CPU only),
     default settings, analyzed (what the GPU run should show);
  2. the job natively with PyTorch's defaults (expected: OOM);
  3. the same under fragscope.observe() (expected: the same OOM, now in an .fslog);
  4. `fragscope analyze` of that log (text + JSON: the OOM's cause) and `fragscope sweep`
     (text + JSON: the recommended PYTORCH_CUDA_ALLOC_CONF); `fragscope verify` with the cap
     flags and without them (the log records the memory fraction itself);
  5. the job natively with the recommended setting (expected: completes), and, when that
     setting is expandable segments, also with the best sweep setting without them.

    oom_check.py OUT_DIR --fragscope BIN [--allowed-gib 4] [--timeout 90]

Needs FRAGSCOPE_LIB_DIR (libfragscope_alloc.so for 1, libfragscope_torch.so for 3) and
PYTHONPATH=hooks/python. Writes OUT_DIR/oom.md and every run's output. Without a GPU it runs 1,
prints "skipped: no CUDA device" (or "skipped: torch is not installed") for the rest; ctest runs it
so (scripts.gpu.oom_design_check). Exit status 0 when (each run that could run) the OOM happened,
was classified as fragmentation and the recommended settings let the job complete; 1 otherwise.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "frag_oom_job.py")
GIB = float(1 << 30)


class Runner:
    def __init__(self, out_dir, fragscope, timeout):
        self.out_dir, self.fragscope, self.timeout = out_dir, fragscope, timeout

    def run(self, name, cmd, env=None):
        """Runs cmd with stdout+stderr into OUT_DIR/name.txt; returns (rc, text)."""
        path = os.path.join(self.out_dir, f"{name}.txt")
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=self.timeout)
            rc, text = p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired as e:
            rc, text = "timeout", f"timed out after {self.timeout}s\n{e.stdout or ''}"
        with open(path, "w") as f:
            f.write(f"$ {' '.join(cmd)}\n{text}")
        return rc, text

    def job(self, name, mode, allowed_gib, conf=None, extra=()):
        env = dict(os.environ)
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        if conf:
            env["PYTORCH_CUDA_ALLOC_CONF"] = conf
        out = os.path.join(self.out_dir, f"{name}.json")
        rc, text = self.run(name, [sys.executable, JOB, mode, out, "--allowed-gib",
                                   str(allowed_gib)] + list(extra), env)
        result = json.load(open(out)) if os.path.exists(out) else None
        return rc, text, result

    def analyze(self, name, log, fraction, capacity):
        """analyze + sweep of a log; returns (cause list, [recommended conf, and the best
        setting without expandable segments when the recommendation has them], lines)."""
        cap = ["--memory-fraction", repr(fraction), "--capacity", str(capacity)]
        a_json = os.path.join(self.out_dir, f"{name}_analyze.json")
        s_json = os.path.join(self.out_dir, f"{name}_sweep.json")
        rc_a, _ = self.run(f"{name}_analyze", [self.fragscope, "analyze", log, "--json", a_json,
                                               "--no-summary"] + cap)
        rc_s, _ = self.run(f"{name}_sweep", [self.fragscope, "sweep", log, "--json", s_json] + cap)
        # Fidelity: the same requests through fragscope's allocator against the log's decisions.
        rc_v, verify = self.run(f"{name}_verify", [self.fragscope, "verify", log] + cap)
        verdict_v = verify.strip().splitlines()[0] if verify.strip() else "(no output)"
        causes, headlines, confs = [], [], []
        if rc_a == 0 and os.path.exists(a_json):
            ooms = json.load(open(a_json))["ranks"][0]["ooms"]["explained"]
            causes = [o["cause"] for o in ooms]
            headlines = [o["headline"] for o in ooms]
        if rc_s == 0 and os.path.exists(s_json):
            sweep = json.load(open(s_json))["sweep"]  # schema fragscope.sweep
            configs = sweep["configs"]
            if sweep.get("recommended") is not None:
                confs.append(configs[sweep["recommended"]]["label"])
            if confs and configs[sweep["recommended"]].get("expandable_segments"):
                # Also the classic fix: the best setting that keeps ordinary segments.
                plain = [c for c in configs if not c.get("expandable_segments") and
                         c.get("pytorch_applicable", True) and c["ooms"] == 0 and not c["error"]]
                plain.sort(key=lambda c: (c["peak_reserved_bytes"], c["device_mallocs"]))
                if plain:
                    confs.append(plain[0]["label"])
        lines = [f"- `fragscope analyze`: exit {rc_a}, OOM causes {causes or 'none'}"]
        lines += [f"  - {h}" for h in headlines[:2]]
        verdict = (f"recommends `PYTORCH_CUDA_ALLOC_CONF={confs[0]}`" if confs
                   else "no recommendation")
        if len(confs) > 1:
            verdict += f"; best without expandable segments: `{confs[1]}`"
        lines.append(f"- `fragscope sweep`: exit {rc_s}, {verdict}")
        lines.append(f"- `fragscope verify`: exit {rc_v}, {verdict_v}")
        return causes, confs, lines


def describe(label, rc, result):
    if result is None:
        return f"- {label}: exit {rc}, no result (see the .txt)"
    oom = result.get("oom")
    what = (f"**OOM** at op {oom['op']} (request {oom['request'] / GIB:.3f} GiB)" if oom
            else "**completed**")
    return (f"- {label}: {what}; conf `{result['conf'] or '(defaults)'}`, cap "
            f"{result['allowed_bytes'] / GIB:.2f} GiB, peak reserved "
            f"{result['peak_reserved'] / GIB:.3f} GiB, live peak of the sequence "
            f"{result['live_peak_bytes'] / GIB:.3f} GiB")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--fragscope", required=True)
    parser.add_argument("--allowed-gib", type=float, default=4.0)
    parser.add_argument("--capacity", type=int, default=0, help="simulated device bytes")
    parser.add_argument("--timeout", type=int, default=90)
    a = parser.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    r = Runner(a.out_dir, a.fragscope, a.timeout)
    md = [f"Fragmentation OOM job (`scripts/gpu/frag_oom_job.py`), cap {a.allowed_gib:g} GiB via "
          "set_per_process_memory_fraction.", ""]
    ok = True

    # 1. Design check on the simulated device.
    sim_log = os.path.join(a.out_dir, "simulated.fslog")
    extra = ["--log", sim_log] + (["--capacity", str(a.capacity)] if a.capacity else [])
    rc, _, sim = r.job("simulated_default", "simulate", a.allowed_gib, extra=extra)
    md.append(describe("simulated device, defaults (design check)", rc, sim))
    if sim is None or sim.get("oom") is None or not os.path.exists(sim_log):
        ok = False
        md.append("  - FAILED: the design check did not run out of memory")
    else:
        causes, confs, lines = r.analyze("simulated", sim_log, sim["fraction"],
                                         sim["capacity_bytes"])
        md += ["  " + line for line in lines]
        if "fragmentation" not in causes or not confs:
            ok = False
            md.append("  - FAILED: not classified as fragmentation, or no recommendation")
        for i, conf in enumerate(confs):
            rc, _, fixed = r.job(f"simulated_fixed{i}", "simulate", a.allowed_gib,
                                 extra=extra[2:] + ["--conf", conf])
            md.append("  " + describe(f"simulated device, `{conf}`", rc, fixed))
            if fixed is None or not fixed.get("completed"):
                ok = False
                md.append(f"  - FAILED: `{conf}` did not complete on the simulated device")

    # 2-5. The real job.
    rc, text, native = r.job("native_default", "torch", a.allowed_gib)
    skip = re.search(r"^skipped: .*$", text, re.M)
    if skip:
        md.append(f"- GPU runs: {skip.group(0)}")
        print("\n".join(md))
        print(skip.group(0))
        write(a.out_dir, md)
        return 0 if ok else 1
    md.append(describe("native, PyTorch defaults", rc, native))
    pattern = os.path.join(a.out_dir, "observed.%p.%d.fslog")
    rc, _, observed = r.job("observe_default", "torch", a.allowed_gib, extra=["--observe",
                                                                             pattern])
    md.append(describe("native under fragscope.observe(), defaults", rc, observed))
    logs = glob.glob(os.path.join(a.out_dir, "observed.*.fslog"))
    confs = []
    if observed is None or observed.get("oom") is None or len(logs) != 1:
        ok = False
        md.append(f"- FAILED: expected an OOM and one observe log, found {len(logs)} log(s)")
    else:
        causes, confs, lines = r.analyze("observed", logs[0], observed["fraction"],
                                         observed["capacity_bytes"])
        md += lines
        if "fragmentation" not in causes:
            ok = False
            md.append(f"- FAILED: the OOM was not classified as fragmentation ({causes})")
        # The observed log records set_per_process_memory_fraction itself (hooks/README.md), so
        # the replay needs no cap flags.
        rc_u, uncapped = r.run("observed_verify_uncapped", [r.fragscope, "verify", logs[0]])
        first = uncapped.strip().splitlines()[0] if uncapped.strip() else "(no output)"
        md.append(f"- `fragscope verify` with no cap flags (the log records the fraction): exit "
                  f"{rc_u}, {first}")
        if rc_u != 0:
            ok = False
            md.append("- FAILED: the observed log does not replay under the cap it recorded")
    for i, conf in enumerate(confs):
        rc, _, fixed = r.job(f"native_fixed{i}", "torch", a.allowed_gib, conf=conf)
        md.append(describe(f"native, `PYTORCH_CUDA_ALLOC_CONF={conf}`", rc, fixed))
        if fixed is None or not fixed.get("completed"):
            ok = False
            md.append(f"- FAILED: `{conf}` did not let the job complete")
    if not confs:
        ok = False
        md.append("- FAILED: no recommended setting")
    write(a.out_dir, md)
    print("\n".join(md))
    return 0 if ok else 1


def write(out_dir, md):
    with open(os.path.join(out_dir, "oom.md"), "w") as f:
        f.write("\n".join(md) + "\n")


if __name__ == "__main__":
    sys.exit(main())
