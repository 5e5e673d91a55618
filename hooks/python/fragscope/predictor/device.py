"""The simulated CUDA device of fragscope.predict: the target GPU's facts, and torch.cuda's Python
API answering as that GPU would while a prediction runs, on a machine without one.

Only what a training or inference step asks of torch.cuda is answered (availability, the device's
properties, the current device and streams (each thread's current stream, side streams with their
own handles), seeds and RNG states, synchronization, memory
statistics from fragscope's allocator). The C++ side (the autograd engine's questions) is
hooks/torch_predict_device.cc. Everything is restored when the prediction ends.
"""

import collections
import contextlib
import itertools
import threading
import types

# name: (torch device name, total_memory bytes, compute capability, multiprocessors, L2 cache
# bytes). The memory sizes are the estimator's presets (estimator/gpu_presets.cc), so that
# `--gpu NAME` means the same device in `predict`, `analyze`, `sweep` and `estimate`. The L2 sizes
# are cudaDeviceProp::l2CacheSize (an H100's flush buffer in a recorded autotuning is 50 MiB; the
# H200 is the same GH100 die); inductor's benchmarker allocates one of that size (autotune.py).
GPUS = {
    "a100-40gb": ("NVIDIA A100-SXM4-40GB", 42405855232, (8, 0), 108, 40 << 20),
    "a100-80gb": ("NVIDIA A100-SXM4-80GB", 85093302272, (8, 0), 108, 40 << 20),
    "h100-80gb": ("NVIDIA H100 80GB HBM3", 85017493504, (9, 0), 132, 50 << 20),
    "h200": ("NVIDIA H200", 150109880320, (9, 0), 132, 50 << 20),
    "rtx-4090": ("NVIDIA GeForce RTX 4090", 25383469957, (8, 9), 128, 72 << 20),
}
_ALIASES = {"a100": "a100-80gb", "h100": "h100-80gb", "h100-sxm": "h100-80gb",
            "h200-141gb": "h200", "4090": "rtx-4090", "rtx4090": "rtx-4090"}

Gpu = collections.namedtuple("Gpu", "key name total_memory capability multiprocessors l2_cache")


def max_threads_per_multiprocessor(gpu):
    """cudaDevAttrMaxThreadsPerMultiProcessor: 1536 on compute capability 8.6 and 8.9, else 2048."""
    return 1536 if gpu.capability in ((8, 6), (8, 9)) else 2048


def find_gpu(name):
    """The Gpu for a preset name (case-insensitive, aliases as `fragscope estimate --gpu`)."""
    key = str(name).lower()
    key = _ALIASES.get(key, key)
    if key not in GPUS:
        raise ValueError(f"unknown GPU {name!r}; known GPUs: {', '.join(GPUS)}")
    return Gpu(key, *GPUS[key])


class _Stream:
    """torch.cuda.Stream's stand-in. The default stream has handle 0; each stream made during a
    prediction gets the next handle, which the allocations made while it is current carry (the
    caching allocator keeps a pool per stream)."""

    _handles = itertools.count(1)
    device_index = 0

    def __init__(self, device=None, priority=0, _handle=None, **kwargs):
        self.cuda_stream = next(_Stream._handles) if _handle is None else _handle
        self.priority = priority

    @property
    def device(self):
        import torch

        return torch.device("cuda", 0)

    def wait_stream(self, stream):
        pass

    def wait_event(self, event):
        pass

    def record_event(self, event=None):
        return event if event is not None else _Event()

    def synchronize(self):
        pass

    def query(self):
        return True

    def __eq__(self, other):
        return isinstance(other, _Stream) and other.cuda_stream == self.cuda_stream

    def __hash__(self):
        return self.cuda_stream

    def __enter__(self):
        self._context = stream(self)
        self._context.__enter__()
        return self

    def __exit__(self, *exc):
        return self._context.__exit__(*exc)


DEFAULT_STREAM = _Stream(_handle=0)

# The current stream of each thread, as CUDA's is per thread.
_current = threading.local()

# The stream backward runs on while one runs (_engine_run_backward): the current stream of the
# thread that called it. On the GPU the engine runs each node on the stream its forward op ran
# on, which is that one when forward and backward share a stream (the usual loop, a backward
# warmed up on a side stream or captured into a CUDA graph). A thread that chose no stream of its
# own (the engine's device thread) runs on it; outside backward, on the default stream.
_backward_stream = [None]


def current_stream(device=None):
    s = getattr(_current, "stream", None)
    if s is None:
        s = _backward_stream[0]
    return DEFAULT_STREAM if s is None else s


def current_stream_handle():
    """The handle of this thread's current stream on the simulated device (0: the default)."""
    return current_stream().cuda_stream


@contextlib.contextmanager
def stream(s=None):
    """torch.cuda.stream(s): `s` is this thread's current stream inside (None: unchanged)."""
    if s is None:
        yield
        return
    previous = getattr(_current, "stream", None)  # None: the thread's default, as it was
    _current.stream = s
    try:
        yield
    finally:
        _current.stream = previous


def _running_backward_on_callers_stream(run_backward):
    """torch.autograd's _engine_run_backward, with backward's stream the caller's meanwhile."""

    def engine_run_backward(*args, **kwargs):
        outer = _backward_stream[0]
        _backward_stream[0] = current_stream()
        try:
            return run_backward(*args, **kwargs)
        finally:
            _backward_stream[0] = outer

    return engine_run_backward


class _Event:
    def __init__(self, *args, **kwargs):
        pass

    def record(self, stream=None):
        pass

    def wait(self, stream=None):
        pass

    def query(self):
        return True

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return 0.0


@contextlib.contextmanager
def patched_attributes(patches):
    """Sets each (object, name, value) of `patches` for the block and puts the old values back."""
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
    try:
        for obj, name, value in patches:
            setattr(obj, name, value)
        yield
    finally:
        for obj, name, value in saved:
            setattr(obj, name, value)


@contextlib.contextmanager
def simulated_cuda(gpu, stats, empty_cache, reset_peaks):
    """torch.cuda answers as `gpu` (a Gpu) would; stats() gives fragscope's memory statistics,
    empty_cache() releases its cache, reset_peaks() starts its peaks anew."""
    import torch
    import torch.cuda.amp.common as amp_common

    props = types.SimpleNamespace(
        name=gpu.name, total_memory=gpu.total_memory, major=gpu.capability[0],
        minor=gpu.capability[1], multi_processor_count=gpu.multiprocessors, is_integrated=False,
        is_multi_gpu_board=False, L2_cache_size=gpu.l2_cache, gcnArchName="", uuid="simulated",
        warp_size=32, max_threads_per_multi_processor=max_threads_per_multiprocessor(gpu))
    rng_state = torch.zeros(16, dtype=torch.uint8)

    def stat(key):
        return lambda device=None: stats().get(key, 0)

    def mem_get_info(device=None):
        reserved = stats().get("reserved_bytes.all.current", 0)
        return gpu.total_memory - reserved, gpu.total_memory

    cuda = torch.cuda
    run_backward = _running_backward_on_callers_stream(torch.autograd.graph._engine_run_backward)
    patches = [
        (cuda, "is_available", lambda: True),
        (cuda, "device_count", lambda: 1),
        (cuda, "current_device", lambda: 0),
        (cuda, "set_device", lambda device: None),
        (cuda, "is_initialized", lambda: True),
        (cuda, "_lazy_init", lambda: None),
        (cuda, "init", lambda: None),
        (cuda, "get_device_capability", lambda device=None: gpu.capability),
        (cuda, "get_device_properties", lambda device=None: props),
        (cuda, "get_device_name", lambda device=None: gpu.name),
        (cuda, "is_bf16_supported", lambda including_emulation=True: gpu.capability >= (8, 0)),
        (cuda, "synchronize", lambda device=None: None),
        (cuda, "is_current_stream_capturing", lambda: False),
        (cuda, "manual_seed", lambda seed: None),
        (cuda, "manual_seed_all", lambda seed: None),
        (cuda, "seed", lambda: None),
        (cuda, "seed_all", lambda: None),
        (cuda, "initial_seed", lambda: 0),
        (cuda, "get_rng_state", lambda device="cuda": rng_state.clone()),
        (cuda, "set_rng_state", lambda state, device="cuda": None),
        (cuda, "get_rng_state_all", lambda: [rng_state.clone()]),
        (cuda, "set_rng_state_all", lambda states: None),
        (cuda, "current_stream", current_stream),
        (cuda, "default_stream", lambda device=None: DEFAULT_STREAM),
        (cuda, "set_stream", lambda s: setattr(_current, "stream", s)),
        (cuda, "stream", stream),
        (cuda, "Stream", _Stream),
        (cuda, "Event", _Event),
        (cuda, "mem_get_info", mem_get_info),
        (cuda, "empty_cache", empty_cache),
        (cuda, "memory_allocated", stat("allocated_bytes.all.current")),
        (cuda, "max_memory_allocated", stat("allocated_bytes.all.peak")),
        (cuda, "memory_reserved", stat("reserved_bytes.all.current")),
        (cuda, "max_memory_reserved", stat("reserved_bytes.all.peak")),
        (cuda, "memory_stats", lambda device=None: dict(stats())),
        (cuda, "reset_peak_memory_stats", lambda device=None: reset_peaks()),
        (amp_common, "amp_definitely_not_available", lambda: False),
        # The accelerator FSDP2's default device mesh and torch.accelerator name.
        (torch._C, "_get_accelerator", lambda: torch.device("cuda")),
        # backward() and grad() call it through torch.autograd's own import of the name.
        (torch.autograd.graph, "_engine_run_backward", run_backward),
        (torch.autograd, "_engine_run_backward", run_backward),
    ]
    _Stream._handles = itertools.count(1)  # each prediction numbers its side streams from 1
    with patched_attributes(patches):
        yield
