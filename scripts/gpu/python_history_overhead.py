#!/usr/bin/env python3
"""What torch.cuda.memory._record_memory_history() costs per allocator event, from Python.

The Python side of bench/gpu_history_overhead (which measures the C++ side and fragscope's
observe mode precisely): warm pairs of torch.cuda.caching_allocator_alloc / _delete in a Python
loop, PyTorch's allocator native, then with _record_memory_history at its defaults (context
"all", stacks "all": Python and C++ stacks per event) and a 100,000-entry ring, in alternating
rounds. A pair is 3 events (alloc, free_requested, free_completed); the Python loop's own cost is
in both figures and cancels in the difference. The stacks here are a few frames deep; a training
step's are deeper and cost more.

    python_history_overhead.py [--pairs N] [--rounds N] [--size BYTES]

Prints one line per round and a JSON summary; exits 0 with "skipped: ..." without a GPU.
"""
import argparse
import json
import statistics
import time


def time_pairs(torch, pairs, size, stream):
    alloc = torch.cuda.caching_allocator_alloc
    delete = torch.cuda.caching_allocator_delete
    start = time.perf_counter()
    for _ in range(pairs):
        delete(alloc(size, 0, stream))
    return (time.perf_counter() - start) / pairs * 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=200000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", type=int, default=1 << 20)
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 0
    stream = torch.cuda.current_stream()
    time_pairs(torch, 1000, args.size, stream)  # warm: the block is cached
    native, history = [], []
    for r in range(args.rounds):
        native.append(time_pairs(torch, args.pairs, args.size, stream))
        torch.cuda.memory._record_memory_history(max_entries=100000)
        history.append(time_pairs(torch, args.pairs, args.size, stream))
        torch.cuda.memory._record_memory_history(enabled=None)
        print(f"round {r + 1}: native {native[-1]:.0f} ns/pair, history {history[-1]:.0f} "
              f"ns/pair: {(history[-1] - native[-1]) / 3:+.0f} ns per event")
    n, h = statistics.median(native), statistics.median(history)
    print(json.dumps({"torch": torch.__version__, "size": args.size, "pairs": args.pairs,
                      "native_ns_per_pair": round(n, 1), "history_ns_per_pair": round(h, 1),
                      "history_added_ns_per_event": round((h - n) / 3, 1)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
