#!/usr/bin/env python3
"""Oracle traces of PyTorch's private memory pools (the validation's pools step), each recorded
with _record_memory_history (no stacks) + _dump_snapshot and checked with `fragscope verify`:

  graph_pool     two CUDA graphs captured into one shared pool (the second with
                 pool=first.pool()), replayed, with eager allocations around them
  compile_ro     torch.compile(mode="reduce-overhead") of a small MLP (CUDA graph trees), called
                 until its graphs are recorded and replayed
  mempool        torch.cuda.MemPool + torch.cuda.use_mem_pool, tensors inside and outside it,
                 the pool dropped and the cache emptied (only with --only: its snapshot cannot
                 verify, see mempool_live)
  mempool_live   the same up to the drop: the pool and some of its tensors still live at the
                 dump, so the snapshot's segments say which are the pool's (after the drop and
                 empty_cache they are gone, and nothing in the trace names the pool)
  observed_graph_pool, observed_mempool
                 graph_pool and mempool run under fragscope.observe() instead: the .fslog of
                 observe mode, whose header says it records no empty_cache calls (torch.cuda.graph
                 empties the cache on entry; the replay infers the calls from the segment frees)

    pools_oracle.py OUT_DIR --fragscope BIN [--only KIND,...] [--dry-run]
    pools_oracle.py record KIND OUT_DIR                                   # child: one trace

Writes OUT_DIR/<kind>.pickle (observed kinds: <kind>.fslog; < 1 MB each), <kind>.json
(memory_stats, device memory), verify_<kind>.txt and pools.md. --dry-run (no GPU): the
parent's verify and report over the committed tests/data/oracle/gpt2_*.pickle and
tests/data/oracle/pools/ recordings instead of new ones. Exit 0 when every trace was recorded
and verify said faithful; 1 otherwise; "skipped: no CUDA device" and 0 without a GPU (and
without --dry-run). A kind whose prerequisite is missing (torch.compile without a working Triton)
is reported as skipped and does not fail the step.
"""
import argparse
import glob
import json
import os
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
KINDS = ("graph_pool", "compile_ro", "mempool", "mempool_live", "observed_graph_pool",
         "observed_mempool")
OBSERVED = "observed_"
# mempool's snapshot cannot say which entries were the pool's (its segments are gone): it
# diverges by design, and observed_mempool is the same job verified from its observed log.
DEFAULT_KINDS = tuple(k for k in KINDS if k != "mempool")


def mlp(torch, width=1024):
    return torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                               torch.nn.Linear(4 * width, width)).cuda()


def graph_pool(torch):
    a, b = mlp(torch), mlp(torch)
    x = torch.randn(64, 1024, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):  # warm-up off the capture, as required
        for _ in range(3):
            b(a(x))
    torch.cuda.current_stream().wait_stream(side)
    g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.no_grad():
        with torch.cuda.graph(g1):
            y = a(x)
        with torch.cuda.graph(g2, pool=g1.pool()):
            z = b(y)
    eager = []
    for i in range(4):
        x.copy_(torch.randn(64, 1024, device="cuda"))
        g1.replay()
        g2.replay()
        eager.append(z.sum() + torch.empty((i + 1) << 20, device="cuda").numel())
    torch.cuda.synchronize()
    del g1, g2, y, z, eager


def compile_ro(torch):
    model = mlp(torch, 512)
    fn = torch.compile(model, mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn(32, 512, device="cuda")
            fn(x).sum().item()
    torch.cuda.synchronize()
    del fn, model


def mempool_live(torch):
    """Returns what must stay alive until the snapshot is dumped."""
    pool = torch.cuda.MemPool()
    outside = [torch.empty(3 << 20, dtype=torch.uint8, device="cuda")]
    with torch.cuda.use_mem_pool(pool):
        inside = [torch.empty((i + 1) << 20, dtype=torch.uint8, device="cuda") for i in range(6)]
        del inside[1::2]
    outside.append(torch.empty(5 << 20, dtype=torch.uint8, device="cuda"))
    torch.cuda.synchronize()
    return pool, inside, outside


def mempool(torch):
    pool, inside, outside = mempool_live(torch)
    del inside
    del pool
    torch.cuda.empty_cache()
    del outside


def record(kind, out_dir):
    import torch

    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 0
    if kind == "compile_ro":
        try:
            import triton  # noqa: F401
        except ImportError as e:
            print(f"skipped: torch.compile needs Triton: {e}")
            return 0
    if kind.startswith(OBSERVED):
        import fragscope

        fragscope.observe(log=os.path.join(out_dir, f"{kind}.fslog"))
        alive = globals()[kind[len(OBSERVED):]](torch)  # noqa: F841
        fragscope.flush()
    else:
        torch.cuda.init()
        torch.cuda.memory._record_memory_history(enabled="all", context=None, max_entries=10**6)
        alive = globals()[kind](torch)  # noqa: F841 (kept until the dump)
        torch.cuda.memory._dump_snapshot(os.path.join(out_dir, f"{kind}.pickle"))
        torch.cuda.memory._record_memory_history(enabled=None)
    with open(os.path.join(out_dir, f"{kind}.json"), "w") as f:
        json.dump({"kind": kind, "torch": torch.__version__,
                   "device": torch.cuda.get_device_name(0),
                   "total_memory": torch.cuda.get_device_properties(0).total_memory,
                   "memory_stats": torch.cuda.memory_stats(0)}, f, indent=1)
    return 0


# The .fslog file header's flags word and its bit "empty_cache calls not recorded" (FORMAT.md:
# FileHeader.header_flags, kHeaderFlagNoEmptyCacheRecords).
FSLOG_MAGIC = b"FSLOG\r\n\x1a"
HEADER_FLAGS_OFFSET = 212
HEADER_FLAG_NO_EMPTY_CACHE_RECORDS = 1 << 2


def records_no_empty_cache(path):
    """Whether the .fslog's header flags say the log records no empty_cache calls."""
    with open(path, "rb") as f:
        head = f.read(HEADER_FLAGS_OFFSET + 4)
    if len(head) < HEADER_FLAGS_OFFSET + 4 or not head.startswith(FSLOG_MAGIC):
        return False
    flags = struct.unpack_from("<I", head, HEADER_FLAGS_OFFSET)[0]
    return bool(flags & HEADER_FLAG_NO_EMPTY_CACHE_RECORDS)


def verify(fragscope, trace, capacity, out_dir, name):
    """`fragscope verify` of one snapshot or observed log; (faithful, its first line). An observed
    log must also say in its header that it records no empty_cache calls."""
    p = subprocess.run([fragscope, "verify", trace, "--capacity", str(capacity)],
                       capture_output=True, text=True, timeout=120)
    text = p.stdout + p.stderr
    ok = p.returncode == 0
    if trace.endswith(".fslog") and not records_no_empty_cache(trace):
        ok = False
        text = "FAILED: the header does not say empty_cache is not recorded\n" + text
    with open(os.path.join(out_dir, f"verify_{name}.txt"), "w") as f:
        f.write(text)
    lines = text.strip().splitlines()
    return ok, (lines[0] if lines else f"(no output, exit {p.returncode})")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "record":
        return record(sys.argv[2], sys.argv[3])
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--fragscope", required=True)
    p.add_argument("--only", help="comma-separated kinds (default: all but mempool)")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--timeout", type=int, default=120, help="per recording, seconds")
    a = p.parse_args()
    kinds = a.only.split(",") if a.only else list(DEFAULT_KINDS)
    if any(k not in KINDS for k in kinds):
        print(f"pools_oracle.py: --only {a.only}: kinds are {', '.join(KINDS)}", file=sys.stderr)
        return 2
    os.makedirs(a.out_dir, exist_ok=True)
    md, ok = [], True
    if a.dry_run:
        oracle = os.path.join(ROOT, "tests", "data", "oracle")
        capacity = json.load(open(os.path.join(oracle, "env.json")))["total_memory"]
        traces = [(os.path.basename(x)[:-len(".pickle")], x, capacity)
                  for x in sorted(glob.glob(os.path.join(oracle, "gpt2_*.pickle")))]
        # The committed recordings of this script (their .json gives the device's memory).
        for info in sorted(glob.glob(os.path.join(oracle, "pools", "*.json"))):
            kind = os.path.basename(info)[:-len(".json")]
            ext = ".fslog" if kind.startswith(OBSERVED) else ".pickle"
            traces.append((kind, info[:-len(".json")] + ext, json.load(open(info))["total_memory"]))
        md.append("Dry run: the committed GPT-2 oracle snapshots and private-pool recordings "
                  "through the same verify.")
        if len(traces) < 2:
            md.append("- FAILED: no tests/data/oracle/gpt2_*.pickle or pools/*.json")
            ok = False
    else:
        traces = []
        for kind in kinds:
            try:
                r = subprocess.run([sys.executable, __file__, "record", kind, a.out_dir],
                                   capture_output=True, text=True, timeout=a.timeout)
                text, rc = r.stdout + r.stderr, r.returncode
            except subprocess.TimeoutExpired:
                text, rc = f"timed out after {a.timeout}s", "timeout"
            with open(os.path.join(a.out_dir, f"record_{kind}.txt"), "w") as f:
                f.write(text)
            if "skipped: no CUDA device" in text:
                print("skipped: no CUDA device")
                return 0
            skip = next((ln for ln in text.splitlines() if ln.startswith("skipped: ")), None)
            info = os.path.join(a.out_dir, f"{kind}.json")
            trace = os.path.join(a.out_dir,
                                 f"{kind}.fslog" if kind.startswith(OBSERVED) else f"{kind}.pickle")
            if skip:
                md.append(f"- {kind}: {skip}")
            elif rc != 0 or not os.path.exists(info):
                ok = False
                md.append(f"- {kind}: recording FAILED (exit {rc}): {text.strip()[-300:]}")
            else:
                traces.append((kind, trace, json.load(open(info))["total_memory"]))
    for name, trace, capacity in traces:
        faithful, first = verify(a.fragscope, trace, capacity, a.out_dir, name)
        size = os.path.getsize(trace)
        md.append(f"- {name} ({size / 1024:.0f} KiB): `fragscope verify --capacity {capacity}`: "
                  f"{first}")
        if not faithful:
            ok = False
        if size > (1 << 20):
            md.append(f"  - over 1 MB: too large for tests/data/oracle/")
    text = "\n".join(md) + "\n"
    with open(os.path.join(a.out_dir, "pools.md"), "w") as f:
        f.write(text)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
