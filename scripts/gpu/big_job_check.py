#!/usr/bin/env python3
"""A larger real job failing by fragmentation, judged and fixed (the validation's bigjob step):
a 1.1B Llama (TinyLlama's shape; train_job.py's loop) trained with variable sequence lengths.

  1. the job uncapped under fragscope.observe(): peak allocated and reserved;
  2. the cap: the replay of that log (`fragscope analyze --memory-fraction`) at caps from the peak
     allocated up to the peak reserved; the largest at which the replay runs out of memory with
     the cause `fragmentation` (live bytes fit, the cache's holes do not);
  3. the job again under that cap (set_per_process_memory_fraction), observed: the OOM;
  4. `fragscope analyze --json -` of that log: the whole-job verdict (ranks[0].verdict: cause,
     basis, capacity_bound, recommended) and the recommended setting (its sweep row's label);
  5. the job natively under the cap with that PYTORCH_CUDA_ALLOC_CONF: it must complete (or the
     verdict said that no setting would: capacity_bound).

    big_job_check.py OUT_DIR --fragscope BIN [--dry-run] [--timeout 150]
    big_job_check.py run OUT.json LOG [--cap BYTES] [--conf CONF] [--dry-run]   # child: one run

--dry-run: a 2-layer model of the same width on fragscope's simulated device (CPU), the runs of 3
and 5 being replays under the cap (5: the job run again under the recommended setting, then
replayed). Writes OUT_DIR/big_job.md and big_job.json, each run's .json and .txt, the observed
logs. Exit 0 when a fragmentation cap was found, the job ran out of memory there, the verdict
named a setting and the job completed with it (or the verdict was capacity-bound); 1 otherwise;
"skipped: no CUDA device" and 0 without a GPU (and without --dry-run).
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train_job  # noqa: E402

MICRO_BATCH = 4
SEQS = [512, 2048, 1024, 1536, 768, 2048, 1280, 1792]  # one step each
CANDIDATES = 12  # caps tried between the peak allocated and the peak reserved
GIB = float(1 << 30)


def config(dry_run):
    if dry_run:
        return dict(train_job.TINYLLAMA_1B, num_hidden_layers=2)
    return train_job.TINYLLAMA_1B


def child(a):
    """One run of the job: uncapped or capped, observed or not, with a PYTORCH_CUDA_ALLOC_CONF."""
    import torch

    shapes = [(s, MICRO_BATCH) for s in SEQS]
    result = {"cap_bytes": a.cap, "conf": a.conf}
    if a.dry_run:
        from fragscope.predictor.device import find_gpu

        with train_job.simulated(a.log, a.gpu, conf=a.conf) as (prediction, mark):
            result["oom"] = train_job.run(config(True), shapes, mark)
            mark("end")
        result.update(peak_allocated=prediction.peak_allocated,
                      peak_reserved=prediction.peak_reserved,
                      total_memory=find_gpu(a.gpu).total_memory)
    else:
        if not torch.cuda.is_available():
            print("skipped: no CUDA device")
            return 0
        total = torch.cuda.get_device_properties(0).total_memory
        if a.log:
            import fragscope

            fragscope.observe(log=a.log)
            mark = fragscope.mark
        else:
            def mark(text):
                pass
        if a.cap:
            torch.cuda.set_per_process_memory_fraction(min(1.0, a.cap / total), 0)
        result["oom"] = train_job.run(config(False), shapes, mark)
        mark("end")
        stats = torch.cuda.memory_stats(0)
        result.update(peak_allocated=stats["allocated_bytes.all.peak"],
                      peak_reserved=stats["reserved_bytes.all.peak"], total_memory=total)
        if a.log:
            fragscope.flush()
    result["completed"] = result["oom"] is None
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    return 0


class Check:
    def __init__(self, a):
        self.a = a
        self.env = dict(os.environ)
        self.env.pop("PYTORCH_CUDA_ALLOC_CONF", None)

    def path(self, name):
        return os.path.join(self.a.out_dir, name)

    def call(self, name, cmd, env=None):
        try:
            p = subprocess.run(cmd, env=env or self.env, capture_output=True, text=True,
                               timeout=self.a.timeout)
            rc, text = p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired:
            rc, text = "timeout", f"timed out after {self.a.timeout}s"
        with open(self.path(f"{name}.txt"), "w") as f:
            f.write(f"$ {' '.join(cmd)}\n{text}")
        return rc, text

    def job(self, name, log=None, cap=None, conf=None):
        """A child run; (its result or None, the output)."""
        env = dict(self.env)
        cmd = [sys.executable, __file__, "run", self.path(f"{name}.json"), log or ""]
        if cap:
            cmd += ["--cap", str(cap)]
        if conf:
            cmd += ["--conf", conf]
            if not self.a.dry_run:
                env["PYTORCH_CUDA_ALLOC_CONF"] = conf
        if self.a.dry_run:
            cmd += ["--dry-run", "--gpu", self.a.gpu]
        rc, text = self.call(name, cmd, env)
        out = self.path(f"{name}.json")
        return (json.load(open(out)) if rc == 0 and os.path.exists(out) else None), text

    def analyze(self, name, log, total, cap, conf=None, sweep=False):
        """`fragscope analyze --json -` of log under cap; ranks[0] or None."""
        cmd = [self.a.fragscope, "analyze", log, "--capacity", str(total), "--memory-fraction",
               repr(min(1.0, cap / total)), "--no-summary", "--json", "-"]
        cmd += [] if sweep else ["--no-sweep"]
        cmd += ["--conf", conf] if conf else []
        rc, text = self.call(name, cmd)
        if rc != 0 or "{" not in text:
            return None
        return train_job.first_json(text)["ranks"][0]


def causes(rank):
    return [o["cause"] for o in rank["ooms"]["explained"]]


def check(a):
    os.makedirs(a.out_dir, exist_ok=True)
    c = Check(a)
    what = (f"a 2-layer model of TinyLlama's width on the simulated {a.gpu} (dry run)"
            if a.dry_run else "a 1.1B Llama (TinyLlama's shape)")
    md = [f"Variable-length training of {what}, micro-batch {MICRO_BATCH}, sequence lengths "
          f"{SEQS}, fused AdamW, bf16 autocast.", ""]
    summary = {"dry_run": a.dry_run, "ok": False}

    def done(ok):
        summary["ok"] = ok
        md.append("" if ok else "FAILED")
        with open(c.path("big_job.md"), "w") as f:
            f.write("\n".join(md) + "\n")
        with open(c.path("big_job.json"), "w") as f:
            json.dump(summary, f, indent=1)
        print("\n".join(md))
        return 0 if ok else 1

    # 1. Uncapped.
    log = c.path("uncapped.fslog")
    free, text = c.job("uncapped", log=log)
    if "skipped: no CUDA device" in text:
        print("skipped: no CUDA device")
        return 0
    if free is None or not free["completed"]:
        md.append(f"- uncapped run failed: {(free or {}).get('oom') or text[-300:]}")
        return done(False)
    total = free["total_memory"]
    md.append(f"- uncapped: peak allocated {free['peak_allocated'] / GIB:.3f} GiB, peak reserved "
              f"{free['peak_reserved'] / GIB:.3f} GiB")
    summary["uncapped"] = free

    # 2. The cap: the largest candidate whose replay dies of fragmentation.
    lo, hi = free["peak_allocated"], free["peak_reserved"]
    cap = None
    for k in range(CANDIDATES, -1, -1):
        candidate = lo + (hi - lo) * k // CANDIDATES
        rank = c.analyze(f"cap_search_{k}", log, total, candidate)
        if rank and rank["ooms"]["count"] and causes(rank)[:1] == ["fragmentation"]:
            cap = candidate
            break
    if cap is None:
        md.append(f"- no cap between {lo / GIB:.3f} and {hi / GIB:.3f} GiB makes the replay die of "
                  "fragmentation")
        return done(False)
    summary["cap_bytes"] = cap
    md.append(f"- cap {cap / GIB:.3f} GiB: the replay of the uncapped log runs out of memory there "
              "by fragmentation")

    # 3. The job under the cap.
    if a.dry_run:
        capped_log = log  # the replay under the cap is the capped run
        md.append("- capped run: the replay above (dry run)")
    else:
        capped_log = c.path("capped.fslog")
        run, text = c.job("capped", log=capped_log, cap=cap)
        if run is None or run["completed"]:
            md.append(f"- capped run: {'completed (expected an OOM)' if run else text[-300:]}")
            return done(False)
        md.append(f"- capped run: **OOM**: {run['oom']}")
        summary["capped"] = run

    # 4. The verdict and the recommendation.
    rank = c.analyze("capped_analyze", capped_log, total, cap, sweep=True)
    if rank is None:
        md.append("- `fragscope analyze` of the capped log failed (see capped_analyze.txt)")
        return done(False)
    v = rank["verdict"]
    summary["verdict"] = {k: v.get(k) for k in ("cause", "basis", "capacity_bound",
                                                "recommended", "why")}
    configs = rank["sweep"]["configs"] if rank.get("sweep") else []
    label = configs[v["recommended"]]["label"] if v.get("recommended") is not None else None
    summary["recommended"] = label
    md.append(f"- verdict: cause {v['cause']}, basis {v['basis'] or '(none)'}, capacity-bound "
              f"{v['capacity_bound']}; recommended `{label}`; {v.get('why', '')}")
    if v["capacity_bound"]:
        md.append("- the verdict says no setting fits the job under this cap: no rerun")
        return done(label is None)
    if label is None:
        md.append("- no recommended setting although the job is not capacity-bound")
        return done(False)

    # 5. The rerun with the recommended setting.
    if a.dry_run:
        fixed_log = c.path("fixed.fslog")
        fixed, text = c.job("fixed", log=fixed_log, conf=label)
        rank = c.analyze("fixed_analyze", fixed_log, total, cap, conf=label) if fixed else None
        ok = rank is not None and rank["ooms"]["count"] == 0
        md.append(f"- rerun with `{label}` under the cap (simulated, replayed): "
                  f"{'completes' if ok else 'FAILS'}")
    else:
        fixed, text = c.job("fixed", cap=cap, conf=label)
        ok = fixed is not None and fixed["completed"]
        md.append(f"- rerun with `PYTORCH_CUDA_ALLOC_CONF={label}` under the cap: "
                  + (f"completes, peak reserved {fixed['peak_reserved'] / GIB:.3f} GiB" if ok
                     else f"FAILS: {(fixed or {}).get('oom') or text[-300:]}"))
    summary["fixed"] = fixed
    return done(ok)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    if len(sys.argv) > 1 and sys.argv[1] == "run":
        p.add_argument("cmd")
        p.add_argument("out")
        p.add_argument("log")
        p.add_argument("--cap", type=int, default=0)
        p.add_argument("--conf", default=None)
        p.add_argument("--dry-run", action="store_true")
        p.add_argument("--gpu", default="h100-80gb")
        return child(p.parse_args())
    p.add_argument("out_dir")
    p.add_argument("--fragscope", required=True)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--gpu", default="h100-80gb", help="the simulated GPU of a dry run")
    p.add_argument("--timeout", type=int, default=150, help="per child process, seconds")
    return check(p.parse_args())


if __name__ == "__main__":
    sys.exit(main())
