"""The allocations of an .fslog as the predict tests compare them: read with `fragscope dump`
($FRAGSCOPE_BIN), each with the phase (the last marker before it) and its requested bytes; and
what the tests that hold a prediction against a recorded GPU log share."""
import json
import os
import re
import subprocess


def allocations(log):
    """[(phase, requested bytes)] of `log`'s allocations in order; phase None before a marker."""
    dump = subprocess.run([os.environ["FRAGSCOPE_BIN"], "dump", log, "--bytes", "--kind",
                           "alloc,marker"], capture_output=True, text=True, check=True).stdout
    out, phase = [], None
    for line in dump.splitlines():
        marker = re.search(r" marker +'(.*)'", line)
        if marker:
            phase = marker.group(1)
        else:
            out.append((phase, int(re.search(r" requested=(\d+) ", line).group(1))))
    return out


# Not modeled by the predictor: cub's temporary storage (embedding backward's sort and scans at
# 4096 token ids).
CUB_TEMPORARIES = {83455, 1279}


def by_phase(allocations):
    """{phase: [requested bytes in order]} of (phase, bytes) pairs."""
    phases = {}
    for phase, size in allocations:
        phases.setdefault(phase, []).append(size)
    return phases


def measured_beside(name, path, prediction):
    """The recorded job's figures (its .json at `path`), printed beside `prediction`'s."""
    with open(path) as f:
        measured = json.load(f)
    print(f"{name}: peak allocated {prediction.peak_allocated} (measured "
          f"{measured['peak_allocated']}), reserved {prediction.peak_reserved} (measured "
          f"{measured['peak_reserved']}), allocations {prediction.allocations} (measured "
          f"{measured['allocations']})")
    return measured
