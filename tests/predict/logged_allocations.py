"""The allocations of an .fslog as the predict tests compare them: read with `fragscope dump`
($FRAGSCOPE_BIN), each with the phase (the last marker before it) and its requested bytes."""
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
