#!/usr/bin/env python3
"""Writes the allocator events PyTorch recorded in each micro_<name>.pickle (record_oracle_traces.py)
as plain text for the C++ oracle test (tests/data/oracle/micro_<name>.events), which then
requires fragscope's replay to emit the same events with the same addresses.

    python3 scripts/gpu/oracle_to_events.py tests/data/oracle

Format: a header line '# reservation_addresses A B ...' (the base of every expandable-segment
reservation, in creation order: the address of its first segment_map, which always maps at the
base), then one event per line:
  ACTION SIZE STREAM ADDR
ACTION is the device_traces action (alloc, free_requested, free_completed, segment_alloc,
segment_free, segment_map, segment_unmap, oom), SIZE its size (the request for alloc/free_*),
STREAM the stream index (0 = default, 1 = side stream), ADDR the address (0 for oom, whose
trace address is the device's free memory).
"""
import glob
import os
import pickle
import sys


def reservation_bytes(total, page):
    return -(-(total + total // 8) // page) * page


def main(data_dir):
    for path in sorted(glob.glob(os.path.join(data_dir, "micro_*.pickle"))):
        snap = pickle.load(open(path, "rb"))
        events = snap["device_traces"][0]
        streams = {0: 0}
        for e in events:
            streams.setdefault(e["stream"], len(streams))
        # Reservation windows: a map outside every known window starts a new reservation. The
        # window is at least the small pool's reserve (2 MiB pages) of the recorded device.
        ops_header = open(path[:-7] + ".ops").read().split("\n")
        total = int([l for l in ops_header if l.startswith("# device_total")][0].split()[2])
        window = reservation_bytes(total, 2 << 20)
        bases = []
        for e in events:
            if e["action"] == "segment_map" and not any(b <= e["addr"] < b + window for b in bases):
                bases.append(e["addr"])
        with open(path[:-7] + ".events", "w") as f:
            f.write("# reservation_addresses " + " ".join(map(str, bases)) + "\n")
            for e in events:
                addr = 0 if e["action"] == "oom" else e["addr"]
                f.write(f"{e['action']} {e['size']} {streams[e['stream']]} {addr}\n")


if __name__ == "__main__":
    main(sys.argv[1])
