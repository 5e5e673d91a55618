"""fragscope inside a PyTorch job: one or two lines per mode (see hooks/README.md).

    import fragscope
    fragscope.use_allocator(conf="max_split_size_mb:128", log="/tmp/job.%r.%d.fslog")  # replace
    fragscope.observe(log="/tmp/job.%r.%d.fslog")                                      # observe
    torch.cuda.MemPool(fragscope.pool_allocator(log="/tmp/pool.%d.fslog"))              # one pool
    # or run the job under LD_PRELOAD=.../libfragscope_preload.so                      # interpose

    fragscope.mark("step 3 / backward")   # a phase marker in the log, in every mode
    fragscope.stats()                     # torch.cuda.memory_stats() keys, in every mode
    print(fragscope.memory_summary())

    fragscope.predict(make_model, step, log="/tmp/pred.fslog")   # no GPU: predict the job
    fragscope.predict_hf("config.json", "/tmp/pred.fslog", seq=2048, micro_batch=4)
    fragscope.predict_hf(..., parallel="fsdp2", world_size=8, rank=3)  # one rank of FSDP2/DDP

The shared libraries are found in $FRAGSCOPE_LIB_DIR, else inside this package (fragscope/lib/,
where `pip install` puts them), else in a build directory of the source tree (build*/hooks/). No
build step is needed for this module itself; torch is imported only when a function needs it.
"""

import collections
import ctypes
import glob
import json
import os
import threading

__all__ = [
    "use_allocator",
    "pool_allocator",
    "pool_stats",
    "pool_empty_cache",
    "observe",
    "mark",
    "record_model",
    "flush",
    "stats",
    "memory_summary",
    "snapshot",
    "reset_peak_stats",
    "preload_mode",
    "lib_dir",
    "predict",
    "predict_hf",
    "build_info",
    "name_modules",
    "name_roles",
]

_ALLOC = "libfragscope_alloc.so"
_TORCH = "libfragscope_torch.so"
_PRELOAD = "libfragscope_preload.so"  # not loaded: found in the process (LD_PRELOAD)
_BUILD_INFO = "fragscope_build.json"

_lock = threading.Lock()
_libs = {}


class _State:
    mode = None  # "replace" after use_allocator
    observing = False
    pool = None  # the allocator object pool_allocator() made (one per process)


_state = _State()


def lib_dir():
    """The directory holding libfragscope_alloc.so (and the other hook libraries)."""
    env = os.environ.get("FRAGSCOPE_LIB_DIR")
    if env:
        if not os.path.isfile(os.path.join(env, _ALLOC)):
            raise FileNotFoundError(f"FRAGSCOPE_LIB_DIR={env} has no {_ALLOC}")
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.path.join(here, "lib")]
    repo = os.path.dirname(os.path.dirname(os.path.dirname(here)))  # hooks/python/fragscope
    candidates += sorted(glob.glob(os.path.join(repo, "build*", "hooks")))
    for candidate in candidates:
        if os.path.isfile(os.path.join(candidate, _ALLOC)):
            return candidate
    raise FileNotFoundError(
        f"cannot find {_ALLOC}: build the hooks (cmake --build <build> --target fragscope_alloc) "
        "and set FRAGSCOPE_LIB_DIR=<build>/hooks")


def build_info():
    """What the libraries in lib_dir() were built as: {"version": "0.1.0", "torch_version":
    "2.11.0" or None (no libfragscope_torch.so)}; None for a build without the file."""
    path = os.path.join(lib_dir(), _BUILD_INFO)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def __getattr__(name):
    if name == "__version__":  # the version of the libraries this module uses
        try:
            info = build_info()
        except FileNotFoundError:
            info = None
        return info["version"] if info else "unknown"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _load(name):
    with _lock:
        return _load_locked(name)


def _load_locked(name):
    if name not in _libs:
        if name != _ALLOC:
            # libfragscope_torch.so needs libfragscope_alloc.so. Loaded first from the same
            # directory, this copy is the one the dynamic linker gives it (a loaded library's
            # soname matches); else LD_LIBRARY_PATH, searched before the library's $ORIGIN
            # runpath, can give it another build's copy, and mark(), flush() and stats() would
            # reach a second allocator that PyTorch never calls.
            _load_locked(_ALLOC)
        path = os.path.join(lib_dir(), name)
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise OSError(
                f"cannot load {path}: {e} (the CUDA runtime it needs comes with torch: "
                "`import torch` first, or put the CUDA toolkit's lib/ on LD_LIBRARY_PATH)"
                if "libcudart" in str(e) else f"cannot load {path}: {e}") from e
        _declare(lib, name)
        _libs[name] = lib
    return _libs[name]


def _declare(lib, name):
    c = ctypes
    if name == _ALLOC:
        lib.fragscope_configure.argtypes = [c.c_char_p, c.c_char_p]
        lib.fragscope_configure.restype = c.c_int
        lib.fragscope_last_error.restype = c.c_char_p
        lib.fragscope_stat_count.restype = c.c_int
        lib.fragscope_stat_key.argtypes = [c.c_int]
        lib.fragscope_stat_key.restype = c.c_char_p
        lib.fragscope_stat_values.argtypes = [c.c_int, c.POINTER(c.c_int64), c.c_int]
        lib.fragscope_stat_values.restype = c.c_int
        for fn in (lib.fragscope_memory_summary, lib.fragscope_snapshot_json):
            fn.argtypes = [c.c_int, c.c_char_p, c.c_size_t]
            fn.restype = c.c_size_t
        lib.fragscope_mark.argtypes = [c.c_char_p]
        lib.fragscope_record_model.argtypes = [c.c_char_p]
        lib.fragscope_flush.restype = c.c_int
        lib.fragscope_reset_peak_stats.argtypes = [c.c_int]
        lib.fragscope_reset_accumulated_stats.argtypes = [c.c_int]
        lib.fragscope_malloc.argtypes = [c.c_size_t, c.c_int, c.c_void_p]
        lib.fragscope_malloc.restype = c.c_void_p
        lib.fragscope_free.argtypes = [c.c_void_p, c.c_size_t, c.c_int, c.c_void_p]
        _declare_contexts(lib.fragscope_define_context, lib.fragscope_set_context,
                          lib.fragscope_tag_block_context)
        lib.fragscope_begin_allocate_to_pool.argtypes = [c.c_int, c.c_uint64, c.c_uint64,
                                                         c.c_void_p]
        lib.fragscope_begin_allocate_to_pool.restype = c.c_int
        for fn in (lib.fragscope_end_allocate_to_pool, lib.fragscope_release_pool,
                   lib.fragscope_pool_use_count):
            fn.argtypes = [c.c_int, c.c_uint64, c.c_uint64]
            fn.restype = c.c_int
    elif name == _TORCH:
        lib.fragscope_torch_version.restype = c.c_char_p
        lib.fragscope_torch_last_error.restype = c.c_char_p
        lib.fragscope_torch_use_allocator.argtypes = [c.c_char_p, c.c_char_p]
        lib.fragscope_torch_use_allocator.restype = c.c_int
        lib.fragscope_torch_observe.argtypes = [c.c_char_p]
        lib.fragscope_torch_observe.restype = c.c_int
        lib.fragscope_torch_observe_mark.argtypes = [c.c_char_p]
        lib.fragscope_torch_observe_record_model.argtypes = [c.c_char_p]
        lib.fragscope_torch_observe_flush.restype = c.c_int
        _declare_contexts(lib.fragscope_torch_observe_define_context,
                          lib.fragscope_torch_observe_set_context,
                          lib.fragscope_torch_observe_tag_block)
    elif name == _PRELOAD:
        lib.fragscope_preload_mode.restype = c.c_char_p
        lib.fragscope_preload_mark.argtypes = [c.c_char_p]
        lib.fragscope_preload_record_model.argtypes = [c.c_char_p]
        lib.fragscope_preload_flush.restype = c.c_int
        for fn in (lib.fragscope_preload_stats_text, lib.fragscope_preload_memory_summary):
            fn.argtypes = [c.c_int, c.c_char_p, c.c_size_t]
            fn.restype = c.c_size_t
        _declare_contexts(lib.fragscope_preload_define_context,
                          lib.fragscope_preload_set_context,
                          lib.fragscope_preload_tag_block_context)


def _declare_contexts(define, set_context, tag):
    """The three context calls every library has (fslog/FORMAT.md, "Context records"):
    define(role, module, op, site, backward) -> id, set_context(id), tag(ptr, device, role, id)."""
    c = ctypes
    define.argtypes = [c.c_int, c.c_char_p, c.c_char_p, c.c_char_p, c.c_int]
    define.restype = c.c_uint32
    set_context.argtypes = [c.c_uint32]
    set_context.restype = None
    tag.argtypes = [c.c_void_p, c.c_int, c.c_int, c.c_uint32]
    tag.restype = c.c_int


def _bytes(value):
    return None if value is None else value.encode()


def _preload():
    """The interposer's C API if this process runs under LD_PRELOAD=libfragscope_preload.so, else
    None; looked up and declared once (a preloaded library is there from the process's start)."""
    with _lock:
        if _PRELOAD not in _libs:
            process = ctypes.CDLL(None)
            found = hasattr(process, "fragscope_preload_mode")
            if found:
                _declare(process, _PRELOAD)
            _libs[_PRELOAD] = process if found else None
        return _libs[_PRELOAD]


def preload_mode():
    """"observe", "cache" or "off" under LD_PRELOAD=libfragscope_preload.so, else None."""
    process = _preload()
    return process.fragscope_preload_mode().decode() if process else None


def _torch_mismatch():
    """Why libfragscope_torch.so cannot serve the running torch, or None when it can."""
    try:
        directory = lib_dir()
    except FileNotFoundError as e:
        return str(e)
    if not os.path.isfile(os.path.join(directory, _TORCH)):
        return f"{directory} has no {_TORCH} (fragscope was built without LibTorch)"
    import torch  # LibTorch's libraries, which libfragscope_torch.so links by name, are now loaded

    running = torch.__version__.split("+")[0]
    info = build_info()
    # Checked before loading: a library built for another torch may not even load.
    built = info.get("torch_version") if info else _load(_TORCH).fragscope_torch_version().decode()
    if built != running:
        return (f"{os.path.join(directory, _TORCH)} was built against torch {built}, this process "
                f"runs torch {torch.__version__}: reinstall fragscope with this torch present "
                "(pip install --force-reinstall --no-cache-dir <fragscope source>)")
    return None


def _torch_lib_if_compatible():
    """libfragscope_torch.so when it exists and was built for the running torch, else None."""
    return None if _torch_mismatch() else _load(_TORCH)


def use_allocator(conf=None, log=None, via="auto", model=None, **job):
    """Makes fragscope's caching allocator PyTorch's CUDA allocator (mode 1, replace).

    Call it before any CUDA tensor exists. conf: PYTORCH_CUDA_ALLOC_CONF syntax (None: the
    FRAGSCOPE_ALLOC_CONF environment variable). log: .fslog path pattern, %p pid, %r rank, %d
    device (None: FRAGSCOPE_LOG; "": no log).

    via="torch" registers through libfragscope_torch.so (LibTorch's createCustomAllocator): an
    out-of-memory raises torch.OutOfMemoryError. via="ctypes" uses only
    torch.cuda.memory.CUDAPluggableAllocator and works with any torch version, but an
    out-of-memory is a NULL pointer PyTorch does not check (an illegal memory access follows; the
    reason is printed on stderr). "auto" picks "torch" when libfragscope_torch.so matches the
    running torch.

    model (optional): the job's model for the analyzer's footprint verdict, as record_model()
    takes it, with its job keys (seq=, micro_batch=, ...).
    """
    import torch

    if _state.mode == "replace":
        raise RuntimeError("fragscope's allocator is already installed and initialized")
    if torch.cuda.is_initialized():
        raise RuntimeError(
            "CUDA is already initialized: call fragscope.use_allocator() before the first CUDA "
            "tensor or torch.cuda.init()")
    if via not in ("auto", "torch", "ctypes"):
        raise ValueError(f"via must be auto, torch or ctypes, not {via!r}")
    torch_lib = _torch_lib_if_compatible() if via != "ctypes" else None
    if via == "torch" and torch_lib is None:
        raise RuntimeError(_torch_mismatch())
    if torch_lib is not None:
        if torch_lib.fragscope_torch_use_allocator(_bytes(conf), _bytes(log)) != 0:
            message = torch_lib.fragscope_torch_last_error().decode()
            raise (RuntimeError if "initialized" in message else ValueError)(message)
    else:
        lib = _load(_ALLOC)
        if lib.fragscope_configure(_bytes(conf), _bytes(log)) != 0:
            raise ValueError(lib.fragscope_last_error().decode())
        pluggable = torch.cuda.memory.CUDAPluggableAllocator(
            os.path.join(lib_dir(), _ALLOC), "fragscope_malloc", "fragscope_free")
        raw = pluggable.allocator()

        def address(fn):
            return ctypes.cast(fn, ctypes.c_void_p).value

        raw.set_init_fn(address(lib.fragscope_init))
        raw.set_reset_fn(address(lib.fragscope_empty_cache))
        raw.set_memory_fraction_fn(address(lib.fragscope_set_memory_fraction))
        raw.set_record_stream_fn(address(lib.fragscope_record_stream))
        torch.cuda.memory.change_current_allocator(pluggable)
    _state.mode = "replace"
    if model is not None:
        record_model(model, **job)


def pool_allocator(conf=None, log=None):
    """fragscope as the allocator of one torch.cuda.MemPool: the least disruptive replace mode.

        pool = torch.cuda.MemPool(fragscope.pool_allocator(log="/tmp/pool.%d.fslog"))
        with torch.cuda.use_mem_pool(pool):
            ...  # this region's memory comes from fragscope, logged; the rest stays PyTorch's

    Returns the allocator object MemPool takes (torch.cuda.memory.CUDAPluggableAllocator's). What
    PyTorch 2.11's MemPool API gives a pool's allocator is the pool's *segments*: PyTorch keeps
    caching, splitting and best fit inside the pool and calls fragscope for each new segment (2
    MiB, 20 MiB, or the request rounded to 2 MiB) and when it frees one (empty_cache of a released
    pool). So the log holds the pool's segment requests and frees, and pool_stats() counts them;
    tensor-level events of the pool stay in PyTorch's own allocator (observe() logs those, with
    the pool's id). A segment PyTorch frees stays in fragscope's cache (reused by the pool's next
    segment request of that size) until pool_empty_cache(). conf and log as for use_allocator();
    one configuration per process, and not together with use_allocator().
    """
    import torch

    if _state.mode == "replace":
        raise RuntimeError(
            "fragscope.use_allocator() already makes fragscope every allocation's allocator; a "
            "pool allocator would add nothing")
    if _state.pool is not None:
        return _state.pool.allocator()
    lib = _load(_ALLOC)
    if lib.fragscope_configure(_bytes(conf), _bytes(log)) != 0:
        raise ValueError(lib.fragscope_last_error().decode())
    pluggable = torch.cuda.memory.CUDAPluggableAllocator(
        os.path.join(lib_dir(), _ALLOC), "fragscope_malloc", "fragscope_free")
    _state.pool = pluggable
    return pluggable.allocator()


def pool_stats(device=None):
    """torch.cuda.memory_stats()-style statistics of the memory fragscope gave a MemPool
    (pool_allocator()): its segments, as fragscope allocated them."""
    if _state.pool is None:
        raise RuntimeError("no fragscope pool allocator: call fragscope.pool_allocator() first")
    return _replace_stats(_device(device))


def pool_empty_cache():
    """Returns the segments a MemPool gave back to fragscope (pool_allocator()) to the device."""
    if _state.pool is not None:
        _load(_ALLOC).fragscope_empty_cache()


def observe(log=None, model=None, **job):
    """Logs PyTorch's own allocator into .fslog files (mode 2, observe); no behaviour change.

    log: path pattern, %p pid, %r rank, %d device (None: FRAGSCOPE_LOG). Initializes CUDA.
    model (optional): the job's model for the analyzer's footprint verdict, as record_model()
    takes it, with its job keys (seq=, micro_batch=, ...).
    """
    import torch

    mismatch = _torch_mismatch()
    if mismatch:
        raise RuntimeError(f"fragscope.observe needs {_TORCH}: {mismatch}")
    lib = _load(_TORCH)
    torch.cuda.init()
    if lib.fragscope_torch_observe(_bytes(log or "")) != 0:
        raise RuntimeError(lib.fragscope_torch_last_error().decode())
    _state.observing = True
    if model is not None:
        record_model(model, **job)


def _write_model(text):
    data = text.encode()
    if _state.mode == "replace":
        _load(_ALLOC).fragscope_record_model(data)
    if _state.observing:
        _load(_TORCH).fragscope_torch_observe_record_model(data)
    process = _preload()
    if process is not None:
        process.fragscope_preload_record_model(data)


def record_model(model, *, seq=None, micro_batch=None, mode="training", **job):
    """Records the job's model in every active log, so that `fragscope analyze` compares its
    theoretical footprint with the job's cap without a --model flag.

    model: an nn.Module with a Hugging Face .config, a config object, a dict, or a config.json
    path. seq and micro_batch: the training step's shape (for inference: batch=, context=); when
    both are None and model is an nn.Module, they are read from the first forward's token ids
    (input_ids) and the model is recorded then. Other job keys: dtype, optimizer, attention
    ("sdpa", "eager", "flash"), recompute, activations. Returns the record's JSON text, or None
    when it waits for the first forward.
    """
    from . import model_record

    if seq is None and micro_batch is None and hasattr(model, "register_forward_pre_hook"):
        holder = {}

        def first_forward(module, args, kwargs):
            shape = model_record.shape_from_inputs(args, kwargs)
            holder["handle"].remove()
            batch, length = shape if shape is not None else (None, None)
            shape_keys = ({"seq": length, "micro_batch": batch} if mode == "training" else
                          {"context": length, "batch": batch})
            _write_model(model_record.model_json(module, mode=mode, **shape_keys, **job))

        holder["handle"] = model.register_forward_pre_hook(first_forward, with_kwargs=True)
        model_record.model_json(model, mode=mode, **job)  # errors now, not in the forward
        return None
    text = model_record.model_json(model, mode=mode, seq=seq, micro_batch=micro_batch, **job)
    _write_model(text)
    return text


def name_modules(sites=False):
    """From now on every allocation of the active modes names the module whose forward or
    backward made it, and with sites=True the code line that called it (module_context.py);
    returns a handle whose remove() stops it."""
    from .module_context import name_modules as start

    return start(sites)


def name_roles(model, optimizer=None):
    """The model's parameters named weights, their gradients and the optimizer's states named so
    when made, each of its parameter's module, in the logs of the active modes
    (module_context.py); returns a handle whose remove() stops it."""
    from .module_context import name_roles as start

    return start(model, optimizer)


def mark(text):
    """A phase marker ("step 3 / backward") in the logs of every active mode."""
    data = str(text).encode()
    if _state.mode == "replace" or _state.pool is not None:
        _load(_ALLOC).fragscope_mark(data)
    if _state.observing:
        _load(_TORCH).fragscope_torch_observe_mark(data)
    process = _preload()
    if process is not None:
        process.fragscope_preload_mark(data)


def flush():
    """Writes every recorded event to the log files now."""
    ok = True
    if _state.mode == "replace" or _state.pool is not None:
        ok &= _load(_ALLOC).fragscope_flush() == 0
    if _state.observing:
        ok &= _load(_TORCH).fragscope_torch_observe_flush() == 0
    process = _preload()
    if process is not None:
        ok &= process.fragscope_preload_flush() == 0
    if not ok:
        raise OSError("fragscope could not write its log (see stderr)")


def _device(device):
    if isinstance(device, int):
        return device
    if device is not None and getattr(device, "index", None) is not None:
        return device.index
    import torch  # None, "cuda" or torch.device("cuda"): the current device

    return torch.cuda.current_device() if torch.cuda.is_initialized() else 0


def _text(fn, device):
    size = fn(device, None, 0)
    buf = ctypes.create_string_buffer(size + 1)
    fn(device, buf, size + 1)
    return buf.value.decode()


def _replace_stats(device):
    lib = _load(_ALLOC)
    count = lib.fragscope_stat_count()
    values = (ctypes.c_int64 * count)()
    lib.fragscope_stat_values(device, values, count)
    pairs = [(lib.fragscope_stat_key(i).decode(), values[i]) for i in range(count)]
    return collections.OrderedDict(sorted(pairs))


def stats(device=None):
    """torch.cuda.memory_stats() of the allocator in use: fragscope's in replace mode and in the
    interposer's cache mode, PyTorch's own otherwise. Same keys, sorted as PyTorch sorts them."""
    device = _device(device)
    if _state.mode == "replace":
        return _replace_stats(device)
    process = _preload()
    if process is not None and process.fragscope_preload_mode() == b"cache":
        pairs = []
        for line in _text(process.fragscope_preload_stats_text, device).splitlines():
            key, value = line.split(" ")
            pairs.append((key, int(value)))
        return collections.OrderedDict(sorted(pairs))
    import torch

    return torch.cuda.memory_stats(device)


def memory_summary(device=None):
    """torch.cuda.memory_summary() of the allocator in use (see stats())."""
    device = _device(device)
    if _state.mode == "replace":
        return _text(_load(_ALLOC).fragscope_memory_summary, device)
    process = _preload()
    if process is not None and process.fragscope_preload_mode() == b"cache":
        return _text(process.fragscope_preload_memory_summary, device)
    import torch

    return torch.cuda.memory_summary(device)


def snapshot(device=None):
    """torch.cuda.memory_snapshot()-style segments (list of dicts) of the allocator in use."""
    if _state.mode == "replace":
        return json.loads(_text(_load(_ALLOC).fragscope_snapshot_json, _device(device)))["segments"]
    import torch

    return torch.cuda.memory_snapshot()


def reset_peak_stats(device=None):
    """torch.cuda.reset_peak_memory_stats() of the allocator in use."""
    device = _device(device)
    if _state.mode == "replace":
        _load(_ALLOC).fragscope_reset_peak_stats(device)
        return
    import torch

    torch.cuda.reset_peak_memory_stats(device)


def predict(make_model, step, log, **options):
    """Predicts a job's CUDA allocations on a machine without a GPU (predict_capture.predict)."""
    from .predict_capture import predict as run

    return run(make_model, step, log, **options)


def predict_hf(config, log, **options):
    """The standard loop of a Hugging Face config, predicted (predict_hf_loop.predict_hf)."""
    from .predict_hf_loop import predict_hf as run

    return run(config, log, **options)
