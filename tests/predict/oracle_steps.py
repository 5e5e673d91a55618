"""Per-step figures of a recorded GPT-2 oracle trace (tests/data/oracle/gpt2_*.pickle), replayed
through fragscope's allocator on a simulated device, for comparison with a prediction.

The snapshot starts after the model and its optimizer existed: the blocks live at its first event
are rebuilt from its final segments rewound through the trace (allocated first, in address order),
then every alloc and free is replayed in order. Steps begin where record_oracle_traces.py's loop
replaces its input ids: an allocation of batch x seq x 8 bytes followed by the free of the previous
step's ids.
"""

import ctypes
import pickle


def load_trace(path):
    with open(path, "rb") as f:
        snapshot = pickle.load(f)
    trace = [(e["action"], e["size"], e["addr"], e["stream"]) for e in snapshot["device_traces"][0]
             if e["action"] in ("alloc", "free_requested")]
    return snapshot, trace


def initial_blocks(snapshot, trace):
    """{address: requested bytes} of the blocks live at the trace's first event."""
    live = {}
    for segment in snapshot["segments"]:
        for block in segment["blocks"]:
            if block["state"] == "active_allocated":
                live[block["address"]] = block["requested_size"]
    for action, size, addr, _ in reversed(trace):
        if action == "alloc":
            live.pop(addr, None)
        else:
            live[addr] = size
    return live


def step_starts(trace, batch, seqs):
    """Indices into trace where each step's ids are allocated."""
    starts = [0]
    for k in range(1, len(seqs)):
        want, previous = batch * seqs[k] * 8, batch * seqs[k - 1] * 8
        for i in range(starts[-1] + 1, len(trace) - 1):
            action, size = trace[i][0], trace[i][1]
            if (action == "alloc" and size == want and trace[i + 1][0] == "free_requested"
                    and trace[i + 1][1] == previous):
                starts.append(i)
                break
        else:
            raise ValueError(f"step {k}'s ids (seq {seqs[k]}) not found in the trace")
    return starts


def replay_steps(lib, snapshot, trace, batch, seqs, device_bytes, conf):
    """[(allocations, peak allocated, peak reserved)] per step, through libfragscope_alloc.so."""
    c = ctypes
    lib.fragscope_simulate.argtypes = [c.c_uint64, c.c_char_p, c.c_char_p]
    if lib.fragscope_simulate(device_bytes, conf.encode(), b"") != 0:
        raise RuntimeError(lib.fragscope_last_error().decode())
    lib.fragscope_stat.argtypes = [c.c_int, c.c_char_p]
    lib.fragscope_stat.restype = c.c_int64
    pointers = {}
    for addr, size in sorted(initial_blocks(snapshot, trace).items()):
        pointers[addr] = lib.fragscope_malloc(size, 0, None)
    starts = step_starts(trace, batch, seqs) + [len(trace)]
    steps = []
    for k in range(len(seqs)):
        lib.fragscope_reset_peak_stats(0)
        allocations = 0
        for action, size, addr, _ in trace[starts[k]:starts[k + 1]]:
            if action == "alloc":
                pointers[addr] = lib.fragscope_malloc(size, 0, None)
                allocations += 1
            else:
                lib.fragscope_free(pointers.pop(addr), 0, 0, None)
        steps.append((allocations, lib.fragscope_stat(0, b"allocated_bytes.all.peak"),
                      lib.fragscope_stat(0, b"reserved_bytes.all.peak")))
    return steps
