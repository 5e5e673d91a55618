"""torch.cuda's memory statistics of the allocator in use, in every mode: stats, memory_summary,
snapshot, reset_peak_stats."""

import collections
import ctypes
import json

from ._library import ALLOC, load, preload, state


def device_index(device):
    if isinstance(device, int):
        return device
    if device is not None and getattr(device, "index", None) is not None:
        return device.index
    import torch  # None, "cuda" or torch.device("cuda"): the current device

    return torch.cuda.current_device() if torch.cuda.is_initialized() else 0


def text(fn, device):
    size = fn(device, None, 0)
    buf = ctypes.create_string_buffer(size + 1)
    fn(device, buf, size + 1)
    return buf.value.decode()


def replace_stats(device):
    lib = load(ALLOC)
    count = lib.fragscope_stat_count()
    values = (ctypes.c_int64 * count)()
    lib.fragscope_stat_values(device, values, count)
    pairs = [(lib.fragscope_stat_key(i).decode(), values[i]) for i in range(count)]
    return collections.OrderedDict(sorted(pairs))


def stats(device=None):
    """torch.cuda.memory_stats() of the allocator in use: fragscope's in replace mode and in the
    interposer's cache mode, PyTorch's own otherwise. Same keys, sorted as PyTorch sorts them."""
    device = device_index(device)
    if state.mode == "replace":
        return replace_stats(device)
    process = preload()
    if process is not None and process.fragscope_preload_mode() == b"cache":
        pairs = []
        for line in text(process.fragscope_preload_stats_text, device).splitlines():
            key, value = line.split(" ")
            pairs.append((key, int(value)))
        return collections.OrderedDict(sorted(pairs))
    import torch

    return torch.cuda.memory_stats(device)


def memory_summary(device=None):
    """torch.cuda.memory_summary() of the allocator in use (see stats())."""
    device = device_index(device)
    if state.mode == "replace":
        return text(load(ALLOC).fragscope_memory_summary, device)
    process = preload()
    if process is not None and process.fragscope_preload_mode() == b"cache":
        return text(process.fragscope_preload_memory_summary, device)
    import torch

    return torch.cuda.memory_summary(device)


def snapshot(device=None):
    """torch.cuda.memory_snapshot()-style segments (list of dicts) of the allocator in use."""
    if state.mode == "replace":
        summary = text(load(ALLOC).fragscope_snapshot_json, device_index(device))
        return json.loads(summary)["segments"]
    import torch

    return torch.cuda.memory_snapshot()


def reset_peak_stats(device=None):
    """torch.cuda.reset_peak_memory_stats() of the allocator in use."""
    device = device_index(device)
    if state.mode == "replace":
        load(ALLOC).fragscope_reset_peak_stats(device)
        return
    import torch

    torch.cuda.reset_peak_memory_stats(device)
