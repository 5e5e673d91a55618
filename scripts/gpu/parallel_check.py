#!/usr/bin/env python3
"""One rank of an FSDP2 or DDP job on the GPU against `python -m fragscope predict --parallel`
(the validation's parallel step). The GPU machines have one GPU, so the rank runs under torch's
fake process group, as the prediction does: every collective is a no-op on the rank's own
tensors, and what the rank allocates (FSDP2's sharded parameters, copy-in and all-gather
buffers, unsharded parameters, reduce-scatter input and output, sharded gradients and optimizer
states; DDP's buckets and gradients) goes through PyTorch's real caching allocator on the real
device. NCCL's own memory is the one thing such a run leaves out; the prediction leaves it out too.

    parallel_check.py all OUT_DIR --fragscope BIN [--dry-run] [--jobs LIST]
    parallel_check.py measure JOB OUT.json LOG [--dry-run]     # child: one rank, observed

JOB is PARALLEL-wWORLD-rRANK (fsdp2-w4-r0); the model is GPT-2 124M, sequence 512 x micro-batch
8 per rank, two training steps (fused AdamW; bf16: FSDP2's MixedPrecisionPolicy(bf16, reduce
fp32) without autocast, DDP under bf16 autocast), as predict_hf's loop. FSDP2 is initialised as
torchtitan does: built on the meta device, sharded, `to_empty` on the GPU, the local shards
initialised in place. The rank's observed log is checked with `fragscope verify` (the
all-gather and reduce-scatter streams, the resized storages). Writes OUT_DIR/parallel.md (peak
allocated, peak reserved, allocations: measured / predicted / delta; verify's verdict),
parallel.json and each run's files. --dry-run (no GPU): the
"measured" rank runs this script's own setup on fragscope's simulated device (the CPU patches of
fragscope.predictor.parallel for the fake group and no GPU), so the loop, the meta-device
initialisation, the predictor's command line and the table run on a CPU; the figures are
reported, not enforced (the prediction emulates to_empty's allocations). Exit 0 when every job
was measured and predicted; "skipped: no CUDA device" and 0 without a GPU (and without
--dry-run).
"""
import argparse
import concurrent.futures
import datetime
import json
import os
import platform
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train_job  # noqa: E402
from predict_accuracy import Parent, commit, delta  # noqa: E402

CONFIG = train_job.GPT2_124M
SEQ, MICRO_BATCH, STEPS = 512, 8, 2
DRY_CONFIG = dict(train_job.GPT2_124M, n_layer=2)
JOBS = ("fsdp2-w4-r0", "fsdp2-w8-r3", "ddp-w4-r0")
GIB = float(1 << 30)


def parse_job(name):
    """(parallel, world_size, rank) of PARALLEL-wWORLD-rRANK; ValueError names a bad one."""
    try:
        parallel, world, rank = name.split("-")
        if parallel not in ("fsdp2", "ddp") or world[0] != "w" or rank[0] != "r":
            raise ValueError
        world_size, rank = int(world[1:]), int(rank[1:])
        if not 0 <= rank < world_size:
            raise ValueError
    except ValueError:
        raise ValueError(f"job {name!r} is not PARALLEL-wWORLD-rRANK (fsdp2|ddp, rank < world)")
    return parallel, world_size, rank


def allreduce_in_place(state, bucket):
    """DDP's comm hook on the fake group, whose allreduce completes without a value."""
    import torch

    future = torch.futures.Future()
    future.set_result(bucket.buffer())
    return future


def build(config, parallel, mesh, on_gpu):
    """The rank's model: FSDP2 from the meta device (fully_shard per block and the root, then
    to_empty on the device and the local shards initialised in place); DDP from the device."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = train_job.hf_config(config)
    if parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        with torch.device("cuda"):
            model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
        model.train()
        ddp = DistributedDataParallel(model)
        if on_gpu:  # fragscope.predictor.parallel registers it on the simulated device
            ddp.register_comm_hook(None, allreduce_in_place)
        return ddp
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    model.train()
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.transformer.h:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    model.to_empty(device="cuda")
    with torch.no_grad():
        for p in model.parameters():
            p.to_local().normal_(0.0, 0.02)
    return model


def train(model, parallel, vocab, mark):
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    train_job.train(model, opt, vocab, [(SEQ, MICRO_BATCH)] * STEPS, mark,
                    autocast=parallel == "ddp")


def measure(name, out, log, dry_run):
    """Child: one rank observed on the GPU, or (dry run) on the simulated H100."""
    import torch

    parallel, world_size, rank = parse_job(name)
    config = DRY_CONFIG if dry_run else CONFIG
    result = {"job": name, "parallel": parallel, "world_size": world_size, "rank": rank}
    if dry_run:
        from fragscope.predictor import parallel as parallelism
        from fragscope.predictor.device import find_gpu

        rank_job = parallelism.Job(parallel, world_size, rank, None)
        with train_job.simulated(log, "h100-80gb") as (prediction, mark), \
                parallelism.fake_process_group(rank_job) as mesh:
            mark("init / weights")
            model = build(config, parallel, mesh, on_gpu=False)
            train(model, parallel, config["vocab_size"], mark)
            mark("end")
            del model
        result.update(peak_allocated=prediction.peak_allocated,
                      peak_reserved=prediction.peak_reserved,
                      allocations=prediction.allocations,
                      device=find_gpu("h100-80gb").name)
    else:
        if not torch.cuda.is_available():
            print("skipped: no CUDA device")
            return 0
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.testing._internal.distributed.fake_pg import FakeStore

        import fragscope

        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size))
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
        torch.cuda.set_device(0)  # every rank on this machine's one GPU (the mesh keeps it)
        mesh = init_device_mesh("cuda", (world_size,))
        fragscope.observe(log=log)
        fragscope.mark("init / weights")
        model = build(config, parallel, mesh, on_gpu=True)
        train(model, parallel, config["vocab_size"], fragscope.mark)
        torch.cuda.synchronize()
        fragscope.mark("end")
        stats = torch.cuda.memory_stats(0)
        result.update(peak_allocated=stats["allocated_bytes.all.peak"],
                      peak_reserved=stats["reserved_bytes.all.peak"],
                      allocations=stats["allocation.all.allocated"],
                      device=torch.cuda.get_device_name(0))
        fragscope.flush()
        dist.destroy_process_group()
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    return 0


def predict(a, parent, name):
    """`python -m fragscope predict --parallel` of one job; its JSON, or {"error": ...}."""
    parallel, world_size, rank = parse_job(name)
    config = os.path.join(a.out_dir, f"{name}.config.json")
    with open(config, "w") as f:
        json.dump(DRY_CONFIG if a.dry_run else CONFIG, f, indent=1)
    cmd = [sys.executable, "-m", "fragscope", "predict", "--config", config, "--seq", str(SEQ),
           "--micro-batch", str(MICRO_BATCH), "--steps", str(STEPS), "--optimizer",
           "adamw-fused", "--gpu", "h100-80gb", "--parallel", parallel, "--world-size",
           str(world_size), "--rank", str(rank), "--json", "--out",
           os.path.join(a.out_dir, f"{name}.predicted.fslog")]
    rc, text = parent.call(f"{name}.predict", cmd, a.timeout)
    if rc != 0:
        return {"error": f"predict exit {rc}: {text.strip().splitlines()[-1:]}"}
    return train_job.first_json(text)


def run_all(a):
    os.makedirs(a.out_dir, exist_ok=True)
    names = a.jobs.split(",") if a.jobs else list(JOBS)
    for n in names:
        try:
            parse_job(n)
        except ValueError as e:
            print(f"parallel_check.py: {e}", file=sys.stderr)
            return 2
    rows, ok = [], True
    parent = Parent(a)
    # The predictions run on the host's CPUs while the GPU runs go one by one, from the end of
    # the first (which says whether there is a GPU).
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(names))
    predictions = {}
    for name in names:
        out = os.path.join(a.out_dir, f"{name}.json")
        cmd = [sys.executable, __file__, "measure", name, out,
               os.path.join(a.out_dir, f"{name}.observed.fslog")]
        rc, text = parent.call(f"{name}.measure", cmd + (["--dry-run"] if a.dry_run else []),
                               a.timeout)
        if "skipped: no CUDA device" in text:
            print("skipped: no CUDA device")
            return 0
        if not predictions:
            predictions = {n: pool.submit(predict, a, parent, n) for n in names}
        measured = json.load(open(out)) if rc == 0 and os.path.exists(out) else None
        verdict = None
        if measured:
            log = os.path.join(a.out_dir, f"{name}.observed.fslog")
            vrc, vtext = parent.call(f"{name}.verify", [a.fragscope, "verify", log], a.timeout)
            verdict = (vtext.strip().splitlines() or ["(no output)"])[0][:120]
            ok = ok and vrc == 0
        predicted = predictions[name].result()
        error = None if measured else f"measure exit {rc}: {text.strip()[-300:]}"
        error = error or predicted.get("error")
        ok = ok and error is None
        rows.append({"job": name, "measured": measured, "predicted": predicted, "error": error,
                     "verify": verdict})
    pool.shutdown()
    write(a, rows)
    return 0 if ok else 1


def write(a, rows):
    device = next((r["measured"]["device"] for r in rows if r["measured"]), "?")
    model = "GPT-2 124M, 2 layers" if a.dry_run else "GPT-2 124M"
    md = [f"One rank of FSDP2 / DDP under the fake process group: {model}, {SEQ} x {MICRO_BATCH} "
          f"per rank, {STEPS} steps (fused AdamW, bf16), on "
          f"{'the simulated H100 (dry run)' if a.dry_run else device}, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}, host "
          f"{platform.node()}, {commit()}; predicted with `python -m fragscope predict "
          "--parallel P --world-size N --rank R`.", "",
          "| job | peak allocated GiB (measured / predicted / delta) | peak reserved GiB | "
          "allocations | `fragscope verify` of the rank's log |", "|---|---|---|---|---|"]
    for r in rows:
        if r["error"]:
            md.append(f"| {r['job']} | error: {r['error'][:200]} | | | |")
            continue
        m, q = r["measured"], r["predicted"]
        cells = []
        for key, qkey in (("peak_allocated", "peak_allocated_bytes"),
                          ("peak_reserved", "peak_reserved_bytes")):
            cells.append(f"{m[key] / GIB:.3f} / {q[qkey] / GIB:.3f} / {delta(m[key], q[qkey])}")
        allocations = sum(ph["allocations"] for ph in q["phases"])
        cells.append(f"{m['allocations']} / {allocations} / "
                     f"{delta(m['allocations'], allocations)}")
        cells.append(r["verify"])
        md.append(f"| {r['job']} | " + " | ".join(cells) + " |")
    text = "\n".join(md) + "\n"
    with open(os.path.join(a.out_dir, "parallel.md"), "w") as f:
        f.write(text)
    with open(os.path.join(a.out_dir, "parallel.json"), "w") as f:
        json.dump({"dry_run": a.dry_run, "rows": rows}, f, indent=1, default=str)
    print(text)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "measure":
        p = argparse.ArgumentParser()
        p.add_argument("cmd")
        p.add_argument("job")
        p.add_argument("out")
        p.add_argument("log")
        p.add_argument("--dry-run", action="store_true")
        c = p.parse_args()
        return measure(c.job, c.out, c.log, c.dry_run)
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("cmd", choices=["all"])
    p.add_argument("out_dir")
    p.add_argument("--fragscope", required=True, help="the binary that verifies the rank's log")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--jobs", help=f"comma-separated jobs (default: {','.join(JOBS)})")
    p.add_argument("--timeout", type=int, default=120, help="per child process, seconds")
    a = p.parse_args()
    return run_all(a)


if __name__ == "__main__":
    sys.exit(main())
