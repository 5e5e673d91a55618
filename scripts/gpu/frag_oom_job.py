#!/usr/bin/env python3
"""A job that dies of a fragmentation OOM under PyTorch's default allocator settings, and the
same allocation sequence on fragscope's simulated device (no GPU needed).

    frag_oom_job.py torch   OUT.json [--allowed-gib G] [--observe LOG]   # the real job (CUDA)
    frag_oom_job.py simulate OUT.json [--allowed-gib G] [--capacity BYTES] [--conf CONF]
                                      [--log LOG]                        # libfragscope_alloc.so

The workload (pattern()) is a loop over "chunks" of growing size, as a job whose inputs grow:
each chunk allocates a large transient workspace, and after it is freed keeps a result of a bit
more than half its size for the rest of the job. Under the default settings the caching
allocator serves each kept result from the front of the workspace's just-freed cached segment
(best fit: it is the smallest free block that is large enough), so every segment ends up pinned
by one live block with a free remainder behind it. Each remainder is smaller than the next,
larger workspace, and split segments cannot be released: the job runs out of memory while
gigabytes are reserved but unallocated. With max_split_size_mb at most the workspace size the
workspaces' segments are never split, results get segments of their own, and the allocator frees
cached workspaces to make room; with expandable_segments:True free pages are unmapped and
remapped where needed. Either way the same sequence fits (the live bytes stay under the cap).

The torch mode bounds the process with torch.cuda.set_per_process_memory_fraction(allowed /
total), so PYTORCH_CUDA_ALLOC_CONF (read at CUDA init) decides whether it completes. The
simulate mode runs the same sequence through fragscope's C ABI on a simulated device of the
same capacity with the same cap. Both write OUT.json: {"completed", "ops_done", "oom": {...},
"fraction", "allowed_bytes", "capacity_bytes", "conf", "peak_reserved", ...}; exit status 0 when
the job completed, 1 when it ran out of memory, 2 on a usage or setup error.
"""
import argparse
import ctypes
import json
import os
import sys
import time

MIB = 1 << 20
GIB = 1 << 30
H100_TOTAL = 85_017_493_504  # torch total_memory of an H100 80GB (estimator/README.md)


def pattern(allowed_bytes):
    """The job's operations: ("alloc", id, bytes), ("free", id), ("mark", text).

    Chunk i's workspace is w_i = allowed/16 + i * allowed/128 (growing); it keeps 0.55 w_i.
    Live bytes after chunk i are 0.55 * sum(w_0..w_i) + the next workspace; the pattern stops
    at 12 chunks, where that is ~0.66 of the cap, comfortably inside it once segments are not
    pinned. The default allocator needs a fresh segment per workspace and cannot release the
    pinned ones: it runs out of memory at chunk 10 (simulated with fragscope's allocator).
    """
    base, growth = allowed_bytes // 16, allowed_bytes // 128
    ops, next_id = [], 0
    for i in range(12):
        work = (base + i * growth) // MIB * MIB
        keep = int(work * 0.55) // MIB * MIB
        ops.append(("mark", f"chunk {i}"))
        ops.append(("alloc", next_id, work))
        ops.append(("free", next_id))
        ops.append(("alloc", next_id + 1, keep))
        next_id += 2
    return ops


def live_peak(ops):
    """The largest sum of live requested bytes over the sequence (what must fit)."""
    live, peak, sizes = 0, 0, {}
    for op in ops:
        if op[0] == "alloc":
            sizes[op[1]] = op[2]
            live += op[2]
            peak = max(peak, live)
        elif op[0] == "free":
            live -= sizes.pop(op[1])
    return peak


def run_torch(args):
    try:
        import torch
    except ImportError:
        print("skipped: torch is not installed")
        return 0
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 0
    total = torch.cuda.get_device_properties(0).total_memory
    allowed = int(args.allowed_gib * GIB)
    fraction = allowed / total
    mark = None
    if args.observe:
        import fragscope

        fragscope.observe(log=args.observe)
        mark = fragscope.mark
    torch.cuda.set_per_process_memory_fraction(fraction, 0)
    result = {"mode": "observe" if args.observe else "native", "capacity_bytes": total,
              "allowed_bytes": allowed, "fraction": fraction,
              "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "completed": False,
              "ops_done": 0, "oom": None}
    ops = pattern(allowed)
    result["live_peak_bytes"] = live_peak(ops)
    live = {}
    start = time.perf_counter()
    try:
        for op in ops:
            if op[0] == "mark":
                if mark:
                    mark(op[1])
            elif op[0] == "alloc":
                t = torch.empty(op[2], dtype=torch.uint8, device="cuda")
                t.fill_(op[1] % 251)  # real work on the block
                live[op[1]] = t
            else:
                del live[op[1]]
            result["ops_done"] += 1
        torch.cuda.synchronize()
        result["completed"] = True
    except torch.OutOfMemoryError as e:
        result["oom"] = {"op": result["ops_done"], "request": ops[result["ops_done"]][2],
                         "message": str(e)}
    stats = torch.cuda.memory_stats(0)
    result["seconds"] = time.perf_counter() - start
    result["peak_reserved"] = stats["reserved_bytes.all.peak"]
    result["peak_allocated"] = stats["allocated_bytes.all.peak"]
    result["reserved_at_end"] = stats["reserved_bytes.all.current"]
    result["allocated_at_end"] = stats["allocated_bytes.all.current"]
    result["num_ooms"] = stats["num_ooms"]
    result["memory_summary"] = torch.cuda.memory_summary(0)
    if args.observe:
        import fragscope

        fragscope.flush()
    return finish(args.out, result)


def run_simulated(args):
    lib_dir = os.environ.get("FRAGSCOPE_LIB_DIR", "")
    path = os.path.join(lib_dir, "libfragscope_alloc.so")
    if not os.path.isfile(path):
        print(f"error: {path} not found (set FRAGSCOPE_LIB_DIR to the hooks build directory)")
        return 2
    capacity = args.capacity or H100_TOTAL
    os.environ["FRAGSCOPE_SIMULATED_DEVICE_BYTES"] = str(capacity)
    lib = ctypes.CDLL(path)
    lib.fragscope_configure.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    lib.fragscope_last_error.restype = ctypes.c_char_p
    lib.fragscope_malloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    lib.fragscope_malloc.restype = ctypes.c_void_p
    lib.fragscope_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    lib.fragscope_set_memory_fraction.argtypes = [ctypes.c_double, ctypes.c_int]
    lib.fragscope_mark.argtypes = [ctypes.c_char_p]
    lib.fragscope_stat.argtypes = [ctypes.c_int, ctypes.c_char_p]
    lib.fragscope_stat.restype = ctypes.c_int64
    if lib.fragscope_configure(args.conf.encode(), (args.log or "").encode()) != 0:
        print(f"error: {lib.fragscope_last_error().decode()}")
        return 2
    allowed = int(args.allowed_gib * GIB)
    fraction = allowed / capacity
    lib.fragscope_set_memory_fraction(fraction, 0)
    ops = pattern(allowed)
    result = {"mode": "simulated", "capacity_bytes": capacity, "allowed_bytes": allowed,
              "fraction": fraction, "conf": args.conf, "completed": False, "ops_done": 0,
              "oom": None, "live_peak_bytes": live_peak(ops)}
    live = {}
    for op in ops:
        if op[0] == "mark":
            lib.fragscope_mark(op[1].encode())
        elif op[0] == "alloc":
            ptr = lib.fragscope_malloc(op[2], 0, None)
            if not ptr:
                result["oom"] = {"op": result["ops_done"], "request": op[2]}
                break
            live[op[1]] = (ptr, op[2])
        else:
            ptr, size = live.pop(op[1])
            lib.fragscope_free(ptr, size, 0, None)
        result["ops_done"] += 1
    else:
        result["completed"] = True
    for key in ("reserved_bytes.all.peak", "allocated_bytes.all.peak",
                "reserved_bytes.all.current", "allocated_bytes.all.current", "num_ooms"):
        result[key] = lib.fragscope_stat(0, key.encode())
    result["peak_reserved"] = result["reserved_bytes.all.peak"]
    lib.fragscope_flush()
    return finish(args.out, result)


def finish(out, result):
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    oom = result["oom"]
    where = f"OOM at op {oom['op']} ({oom['request'] / MIB:.0f} MiB)" if oom else "completed"
    print(f"{result['mode']} conf='{result['conf']}' cap {result['allowed_bytes'] / GIB:.2f} GiB: "
          f"{where}; peak reserved {result['peak_reserved'] / GIB:.2f} GiB, live peak of the "
          f"sequence {result['live_peak_bytes'] / GIB:.2f} GiB")
    return 0 if result["completed"] else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["torch", "simulate"])
    parser.add_argument("out")
    parser.add_argument("--allowed-gib", type=float, default=4.0)
    parser.add_argument("--observe", default="", help="torch: fragscope.observe(log=...)")
    parser.add_argument("--capacity", type=int, default=0, help="simulate: device bytes")
    parser.add_argument("--conf", default="", help="simulate: allocator settings")
    parser.add_argument("--log", default="", help="simulate: .fslog path")
    args = parser.parse_args()
    return run_torch(args) if args.mode == "torch" else run_simulated(args)


if __name__ == "__main__":
    sys.exit(main())
