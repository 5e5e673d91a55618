#!/usr/bin/env python3
"""Who holds the memory in a real job, and a real generation against its prediction (the
validation's contexts step).

1. Contexts: GPT-2 124M trained under fragscope.observe() twice, plainly and with
   fragscope.name_modules() + fragscope.name_roles(model, optimizer): the named run must make
   the same allocations in every phase (naming adds no allocation), its log must name the roles
   (weights, gradients, optimizer states) and modules of the demand's peak, and it is diffed
   against `python -m fragscope predict` of the same job (roles and modules by phase); steps/s
   of both runs show the hooks' cost.
2. Generation: a 4-layer TinyLlama-width model's `generate` (prompt x batch, N new tokens,
   greedy, bf16 autocast over fp32 weights, dynamic and static caches; a static cache's decode
   forward compiled by transformers, mode reduce-overhead, as by default) under observe,
   with the predictor's markers (prefill, each decode step, generated), against `predict
   --generate N --cache C`: peaks and each phase's allocations (`fragscope diff`), and the
   sequences' length (an early EOS would make the GPU run shorter than the prediction assumes).

    contexts_check.py all OUT_DIR --fragscope BIN [--dry-run] [--timeout S]
    contexts_check.py child KIND OUT.json LOG [--dry-run]   # KIND: plain, named, dynamic, static

--dry-run (no GPU): the "measured" runs are the same loops on fragscope's simulated device (the
predictor's capture, which names roles and modules itself), so that the loops, the markers, the
predictor's command lines, the diffs and the table run on a CPU. Writes OUT_DIR/contexts.md and
contexts.json. Exit 0 when every run was measured, predicted and diffed and every check passed;
"skipped: no CUDA device" and 0 without a GPU (and without --dry-run).
"""
import argparse
import contextlib
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import predict_accuracy  # noqa: E402
import train_job  # noqa: E402
from predict_accuracy import commit, delta, gpu_key  # noqa: E402

TRAIN = dict(config=train_job.GPT2_124M, seq=512, micro_batch=8, steps=3)
DRY_TRAIN = dict(config=dict(train_job.GPT2_124M, n_layer=2), seq=128, micro_batch=2, steps=2)
GENERATE = dict(config=dict(train_job.TINYLLAMA_1B, num_hidden_layers=4), prompt=512, batch=4,
                new_tokens=32)
DRY_GENERATE = dict(config=dict(train_job.TINYLLAMA_1B, num_hidden_layers=2, hidden_size=256,
                                intermediate_size=512, num_attention_heads=4,
                                num_key_value_heads=2), prompt=32, batch=2, new_tokens=4)
KINDS = ("plain", "named", "dynamic", "static")


@contextlib.contextmanager
def device(log, dry_run):
    """yields mark: fragscope.observe() on the GPU, or the simulated device's capture."""
    if dry_run:
        with train_job.simulated(log, "h100-80gb") as (_, mark):
            yield mark
        return
    import fragscope

    fragscope.observe(log)
    yield fragscope.mark


def child(kind, out, log, dry_run):
    import torch

    if not dry_run and not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 0
    result = {"kind": kind}
    with device(log, dry_run) as mark:
        if kind in ("plain", "named"):
            job = DRY_TRAIN if dry_run else TRAIN
            mark("init / weights")
            model, opt = train_job.build(job["config"])
            if kind == "named":
                name(model, opt, dry_run)
            start = time.perf_counter()
            train_job.train(model, opt, train_job.hf_config(job["config"]).vocab_size,
                            [(job["seq"], job["micro_batch"])] * job["steps"], mark)
            if not dry_run:
                torch.cuda.synchronize()
            result["steps_per_s"] = job["steps"] / (time.perf_counter() - start)
        else:
            result["sequence_length"], model = generate(kind, mark, dry_run)
        mark("end")  # with the model, as the predictor marks it
        del model
    with open(out, "w") as f:
        json.dump(result, f)
    return 0


def name(model, opt, dry_run):
    """Roles and modules named from now on: fragscope.name_modules() and name_roles() on the
    GPU; on the simulated device the predictor's own tagging (its capture names modules)."""
    if dry_run:
        from fragscope.predictor import roles

        roles.name_parameters(model)
        roles.tag_states_when_made(opt)
        roles.tag_gradients_when_made(model.parameters())
        return
    import fragscope

    fragscope.name_modules()
    fragscope.name_roles(model, opt)


def generate(cache, mark, dry_run):
    """The predictor's generation (predictor.hf_loop's: random prompts, all-ones mask, greedy,
    transformers' own auto-compile of a static cache's decode) with its markers; (the generated
    sequences' length, the model)."""
    import torch
    from transformers import AutoModelForCausalLM

    from fragscope.predictor import generate as generation

    job = DRY_GENERATE if dry_run else GENERATE
    cfg = train_job.hf_config(job["config"])
    mark("init / weights")
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()
    with torch.autocast("cuda", dtype=torch.bfloat16), torch.no_grad():
        if dry_run:  # the predictor's own call, which answers generate's reads of fake values
            generation.generate(model, step=0, prompt=job["prompt"], batch=job["batch"],
                                      new_tokens=job["new_tokens"], cache=cache,
                                      vocab_size=cfg.vocab_size, marked=mark, notes=[])
            return job["prompt"] + job["new_tokens"], model
        mark("step 0 / prefill")
        with generation._marking_steps(model, 0, mark):
            ids = torch.randint(0, cfg.vocab_size, (job["batch"], job["prompt"]), device="cuda")
            mask = torch.ones_like(ids)
            out = model.generate(input_ids=ids, attention_mask=mask,
                                 max_new_tokens=job["new_tokens"], do_sample=False,
                                 cache_implementation=cache,
                                 return_dict_in_generate=True)
            del ids, mask
        mark("step 0 / generated")
        length = out.sequences.shape[1]
        del out
    return length, model


class Parent(predict_accuracy.Parent):
    """predict_accuracy's runner of children (OUT_DIR/name.txt per command), with this step's
    predictions and reads."""

    def json_of(self, name, cmd):
        rc, text = self.call(name, cmd, self.a.timeout)
        if rc != 0:
            raise RuntimeError(f"{name}: exit {rc}: {text.strip().splitlines()[-1:]}")
        return train_job.first_json(text)

    def predict_kind(self, kind, gpu):
        dry = self.a.dry_run
        if kind in ("plain", "named"):
            job = DRY_TRAIN if dry else TRAIN
            shape = ["--seq", str(job["seq"]), "--micro-batch", str(job["micro_batch"]),
                     "--steps", str(job["steps"]), "--optimizer", "adamw-fused"]
        else:
            job = DRY_GENERATE if dry else GENERATE
            shape = ["--seq", str(job["prompt"]), "--micro-batch", str(job["batch"]),
                     "--generate", str(job["new_tokens"]), "--cache", kind, "--dtype", "bf16"]
        config = self.path(f"{kind}.config.json")
        with open(config, "w") as f:
            json.dump(job["config"], f)
        log = self.path(f"{kind}.predicted.fslog")
        self.json_of(f"{kind}.predict", [sys.executable, "-m", "fragscope", "predict",
                                         "--config", config, *shape, "--gpu", gpu, "--json",
                                         "--out", log])
        return log

    def analyze(self, name, log):
        return self.json_of(name, [self.a.fragscope, "analyze", log, "--no-sweep", "--json",
                                   "-"])["ranks"][0]

    def diff(self, name, a, b):
        return self.json_of(name, [self.a.fragscope, "diff", a, b, "--json", "-"])["comparison"]


def phase_counts(rank):
    return {p["phase"]: p["allocations"] for p in rank["phases"]}


def run_all(a):
    import torch

    if not a.dry_run and not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 0
    os.makedirs(a.out_dir, exist_ok=True)
    p = Parent(a)
    gpu = "h100-80gb" if a.dry_run else gpu_key(torch.cuda.get_device_name())
    rows, checks = {}, []

    def check(ok, text):
        checks.append({"ok": bool(ok), "check": text})

    for kind in KINDS:
        log = p.path(f"{kind}.fslog")
        args = [sys.executable, __file__, "child", kind, p.path(f"{kind}.json"), log]
        rc, text = p.call(f"{kind}.run", args + (["--dry-run"] if a.dry_run else []), a.timeout)
        if rc != 0:
            check(False, f"{kind}: the run ended with exit {rc}: {text.strip()[-300:]}")
            continue
        with open(p.path(f"{kind}.json")) as f:
            row = json.load(f)
        try:
            row["analysis"] = p.analyze(f"{kind}.analyze", log)
            predicted = p.predict_kind(kind, gpu)
            row["diff"] = p.diff(f"{kind}.diff", log, predicted)
        except RuntimeError as e:
            check(False, str(e))
            continue
        rows[kind] = row
    if "plain" in rows and "named" in rows:
        check(phase_counts(rows["plain"]["analysis"]) == phase_counts(rows["named"]["analysis"]),
              "naming adds no allocation: the plain and named runs' allocations per phase agree")
        demand = rows["named"]["analysis"]["verdict"]["demand"]
        parts = {t["name"] for t in demand.get("terms", [])}
        check({"weights", "gradients", "optimizer_states"} <= parts,
              f"the named run's peak names weights, gradients, optimizer states ({sorted(parts)})")
        check(demand.get("modules"), "the named run's peak is split by module")
    for kind in ("dynamic", "static"):
        if kind in rows:
            job = DRY_GENERATE if a.dry_run else GENERATE
            length = rows[kind]["sequence_length"]
            check(length == job["prompt"] + job["new_tokens"],
                  f"{kind}: generate ran every new token ({length} of "
                  f"{job['prompt'] + job['new_tokens']})")
    write(a, rows, checks, gpu)
    failed = [c for c in checks if not c["ok"]]
    return 1 if failed or len(rows) < len(KINDS) else 0


def write(a, rows, checks, gpu):
    lines = [f"# Contexts and generation on {gpu} ({commit()}, "
             f"{time.strftime('%Y-%m-%d')}{', dry run' if a.dry_run else ''})", "",
             "| run | steps/s or length | peak allocated measured / predicted | peak reserved "
             "measured / predicted | allocations measured / predicted |",
             "|---|---|---|---|---|"]
    for kind, row in rows.items():
        c = row["diff"]
        first = row.get("steps_per_s", row.get("sequence_length"))
        cells = []
        for key in ("peak_allocated_bytes", "peak_reserved_bytes", "allocations"):
            m, pr = c["a_figures"][key], c["b_figures"][key]
            cells.append(f"{m} / {pr} ({delta(m, pr)})")
        lines.append(f"| {kind} | {first:.3g} | " + " | ".join(cells) + " |")
    lines += ["", "Where measured and predicted differ (per phase; `fragscope diff`):", ""]
    for kind, row in rows.items():
        for d in row["diff"].get("differences", [])[:12]:
            lines.append(f"- {kind}: {json.dumps(d)[:400]}")
    lines += ["", "Checks:", ""] + [f"- {'ok' if c['ok'] else 'FAILED'}: {c['check']}"
                                    for c in checks]
    with open(os.path.join(a.out_dir, "contexts.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(a.out_dir, "contexts.json"), "w") as f:
        json.dump({"gpu": gpu, "rows": {k: {x: v for x, v in r.items() if x != "analysis"}
                                        for k, r in rows.items()}, "checks": checks}, f)
    print("\n".join(lines))


def step_main(doc, kinds, child_fn, run_all_fn, timeout):
    """The command line of a comparison step: `all OUT_DIR --fragscope BIN [--dry-run]` runs
    every job and compares; `child KIND OUT LOG` runs one job (observed, or simulated)."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("what", choices=["all", "child"])
    parser.add_argument("args", nargs="+")
    parser.add_argument("--fragscope", default="")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--timeout", type=int, default=timeout)
    a = parser.parse_args()
    if a.what == "child":
        kind, out, log = a.args
        if kind not in kinds:
            parser.error(f"KIND must be one of {', '.join(kinds)}")
        return child_fn(kind, out, log, a.dry_run)
    (a.out_dir,) = a.args
    if not a.fragscope:
        parser.error("all needs --fragscope BIN")
    return run_all_fn(a)


def main():
    return step_main(__doc__, KINDS, child, run_all, 120)


if __name__ == "__main__":
    sys.exit(main())
