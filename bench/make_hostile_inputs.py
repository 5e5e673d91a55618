#!/usr/bin/env python3
"""Writes the large inputs of the linear-time benchmarks (bench/README.md, "Hostile inputs").

  make_hostile_inputs.py snapshot N OUT.pickle  a PyTorch snapshot whose N segments (2 MiB,
                                                small pool, one 512-byte block each) all exist
                                                before its one-allocation trace
  make_hostile_inputs.py ooms N OUT.pickle      a PyTorch snapshot of N such segments that fill
                                                the device, whose trace is N out-of-memory
                                                records of 20 MiB each
  make_hostile_inputs.py json N OUT.json        a Hugging Face Llama-2-7B config.json with N
                                                more keys (which the reader parses and ignores)

The snapshot holds 2 TiB for N = 10^6, more than the 1 TiB a replay assumes for a snapshot
without a capacity: most segments do not fit, which once cost a walk of every segment each. In
the OOM snapshot the records' device_free of 0 makes the device exactly as large as the segments
(the capacity a snapshot implies); each record's replay runs the allocator's retry ladder and
out-of-memory report, which once walked every free block and segment each.
"""
import json
import pickle
import sys


BASE = 0x7F0000000000
SEGMENT = 2 << 20


def small_segments(n):
    """n 2 MiB small-pool segments, each with one live 512-byte block and a free remainder."""
    base, size = BASE, SEGMENT
    segments = []
    for i in range(n):
        address = base + i * size
        segments.append({
            "device": 0, "address": address, "total_size": size, "allocated_size": 512,
            "active_size": 512, "requested_size": 500, "stream": 0, "segment_type": "small",
            "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
            "blocks": [
                {"address": address, "size": 512, "requested_size": 500,
                 "state": "active_allocated", "frames": []},
                {"address": address + 512, "size": size - 512, "requested_size": 0,
                 "state": "inactive", "frames": []},
            ],
        })
    return segments


def snapshot(n, out):
    segments = small_segments(n)
    # The trace: one large-pool allocation (1.5 MiB, in a 20 MiB segment of its own), freed.
    last = BASE + n * SEGMENT
    large = 20 << 20
    request = 3 << 19
    trace = [
        {"action": "segment_alloc", "addr": last, "size": large, "stream": 0, "time_us": 1},
        {"action": "alloc", "addr": last, "size": request, "stream": 0, "time_us": 2},
        {"action": "free_requested", "addr": last, "size": request, "stream": 0, "time_us": 3},
        {"action": "free_completed", "addr": last, "size": request, "stream": 0, "time_us": 3},
    ]
    segments.append({
        "device": 0, "address": last, "total_size": large, "allocated_size": 0, "active_size": 0,
        "requested_size": 0, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
        "is_expandable": False, "frames": [],
        "blocks": [{"address": last, "size": large, "requested_size": 0, "state": "inactive",
                    "frames": []}],
    })
    with open(out, "wb") as f:
        pickle.dump({"segments": segments, "device_traces": [trace],
                     "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": ""}}, f, protocol=4)


def ooms(n, out):
    trace = [{"action": "oom", "size": 20 << 20, "device_free": 0, "stream": 0, "time_us": i + 1}
             for i in range(n)]
    with open(out, "wb") as f:
        pickle.dump({"segments": small_segments(n), "device_traces": [trace],
                     "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": ""}}, f, protocol=4)


def keys(n, out):
    config = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
              "num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 11008,
              "vocab_size": 32000}
    config.update({f"extra_{i}": i for i in range(n)})
    with open(out, "w") as f:
        json.dump(config, f)


def main():
    makers = {"snapshot": snapshot, "ooms": ooms, "json": keys}
    if len(sys.argv) != 4 or sys.argv[1] not in makers:
        sys.exit(__doc__)
    makers[sys.argv[1]](int(sys.argv[2]), sys.argv[3])


if __name__ == "__main__":
    main()
