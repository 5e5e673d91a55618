"""The allocations of an .fslog as the predict tests compare them: read with `fragscope dump`
($FRAGSCOPE_BIN), each with the phase (the last marker before it) and its requested bytes."""
import os
import re
import subprocess


def events(log):
    """[(kind, phase, pointer, requested bytes, stream)] of `log`'s allocations ("alloc") and
    frees ("free": PyTorch's free_requested) in order; phase None before a marker."""
    dump = subprocess.run([os.environ["FRAGSCOPE_BIN"], "dump", log, "--bytes", "--kind",
                           "alloc,free_requested,marker"], capture_output=True, text=True,
                          check=True).stdout
    out, phase = [], None
    for line in dump.splitlines():
        marker = re.search(r" marker +'(.*)'", line)
        if marker:
            phase = marker.group(1)
            continue
        fields = dict(re.findall(r" (ptr|requested|stream)=(\S+)", line))
        kind = "alloc" if re.search(r" alloc ", line) else "free"
        out.append((kind, phase, int(fields["ptr"], 16), int(fields["requested"]),
                    int(fields["stream"], 16)))
    return out


def allocations(log):
    """[(phase, requested bytes)] of `log`'s allocations in order; phase None before a marker."""
    return [(e[1], e[3]) for e in events(log) if e[0] == "alloc"]


def peaks_on_simulated_device(log):
    """(peak allocated, peak reserved) of `log`'s requests and frees, in its order and on its
    streams, served by fragscope's allocator on the simulated device a prediction uses (its
    addresses, not the GPU's)."""
    import tempfile

    from fragscope.predict_capture import _Session

    session = _Session(os.path.join(tempfile.mkdtemp(), "requests.fslog"), None)
    blocks, streams = {}, {0: 0}
    for kind, _, ptr, size, stream in events(log):
        handle = streams.setdefault(stream, len(streams))
        if kind == "alloc":
            blocks[ptr] = session.malloc(size, handle)
        else:
            session.free(blocks.pop(ptr))
    stats = session.stats()
    session.close()
    return stats["allocated_bytes.all.peak"], stats["reserved_bytes.all.peak"]
