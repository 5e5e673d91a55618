"""The hook libraries: where they are (lib_dir), what they were built as (build_info), each
loaded once with its C API declared (load; the interposer's found in the process: preload), and
which of fragscope's modes this process has turned on (state)."""

import ctypes
import glob
import json
import os
import threading

ALLOC = "libfragscope_alloc.so"
TORCH = "libfragscope_torch.so"
PRELOAD = "libfragscope_preload.so"  # not loaded: found in the process (LD_PRELOAD)
BUILD_INFO = "fragscope_build.json"

lock = threading.Lock()
libs = {}


class State:
    mode = None  # "replace" after use_allocator
    observing = False
    pool = None  # the allocator object pool_allocator() made (one per process)


state = State()


def lib_dir():
    """The directory holding libfragscope_alloc.so (and the other hook libraries)."""
    env = os.environ.get("FRAGSCOPE_LIB_DIR")
    if env:
        if not os.path.isfile(os.path.join(env, ALLOC)):
            raise FileNotFoundError(f"FRAGSCOPE_LIB_DIR={env} has no {ALLOC}")
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.path.join(here, "lib")]
    repo = os.path.dirname(os.path.dirname(os.path.dirname(here)))  # hooks/python/fragscope
    candidates += sorted(glob.glob(os.path.join(repo, "build*", "hooks")))
    for candidate in candidates:
        if os.path.isfile(os.path.join(candidate, ALLOC)):
            return candidate
    raise FileNotFoundError(
        f"cannot find {ALLOC}: build the hooks (cmake --build <build> --target fragscope_alloc) "
        "and set FRAGSCOPE_LIB_DIR=<build>/hooks")


def build_info():
    """What the libraries in lib_dir() were built as: {"version": "0.1.0", "torch_version":
    "2.11.0" or None (no libfragscope_torch.so)}; None for a build without the file."""
    path = os.path.join(lib_dir(), BUILD_INFO)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def load(name):
    with lock:
        return load_locked(name)


def load_locked(name):
    if name not in libs:
        if name != ALLOC:
            # libfragscope_torch.so needs libfragscope_alloc.so. Loaded first from the same
            # directory, this copy is the one the dynamic linker gives it (a loaded library's
            # soname matches); else LD_LIBRARY_PATH, searched before the library's $ORIGIN
            # runpath, can give it another build's copy, and mark(), flush() and stats() would
            # reach a second allocator that PyTorch never calls.
            load_locked(ALLOC)
        path = os.path.join(lib_dir(), name)
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise OSError(
                f"cannot load {path}: {e} (the CUDA runtime it needs comes with torch: "
                "`import torch` first, or put the CUDA toolkit's lib/ on LD_LIBRARY_PATH)"
                if "libcudart" in str(e) else f"cannot load {path}: {e}") from e
        declare(lib, name)
        libs[name] = lib
    return libs[name]


def declare(lib, name):
    c = ctypes
    if name == ALLOC:
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
        declare_contexts(lib.fragscope_define_context, lib.fragscope_set_context,
                         lib.fragscope_tag_block_context)
        lib.fragscope_begin_allocate_to_pool.argtypes = [c.c_int, c.c_uint64, c.c_uint64,
                                                         c.c_void_p]
        lib.fragscope_begin_allocate_to_pool.restype = c.c_int
        for fn in (lib.fragscope_end_allocate_to_pool, lib.fragscope_release_pool,
                   lib.fragscope_pool_use_count):
            fn.argtypes = [c.c_int, c.c_uint64, c.c_uint64]
            fn.restype = c.c_int
    elif name == TORCH:
        lib.fragscope_torch_version.restype = c.c_char_p
        lib.fragscope_torch_last_error.restype = c.c_char_p
        lib.fragscope_torch_use_allocator.argtypes = [c.c_char_p, c.c_char_p]
        lib.fragscope_torch_use_allocator.restype = c.c_int
        lib.fragscope_torch_observe.argtypes = [c.c_char_p]
        lib.fragscope_torch_observe.restype = c.c_int
        lib.fragscope_torch_observe_mark.argtypes = [c.c_char_p]
        lib.fragscope_torch_observe_record_model.argtypes = [c.c_char_p]
        lib.fragscope_torch_observe_flush.restype = c.c_int
        declare_contexts(lib.fragscope_torch_observe_define_context,
                         lib.fragscope_torch_observe_set_context,
                         lib.fragscope_torch_observe_tag_block)
    elif name == PRELOAD:
        lib.fragscope_preload_mode.restype = c.c_char_p
        lib.fragscope_preload_mark.argtypes = [c.c_char_p]
        lib.fragscope_preload_record_model.argtypes = [c.c_char_p]
        lib.fragscope_preload_flush.restype = c.c_int
        for fn in (lib.fragscope_preload_stats_text, lib.fragscope_preload_memory_summary):
            fn.argtypes = [c.c_int, c.c_char_p, c.c_size_t]
            fn.restype = c.c_size_t
        declare_contexts(lib.fragscope_preload_define_context,
                         lib.fragscope_preload_set_context,
                         lib.fragscope_preload_tag_block_context)


def declare_contexts(define, set_context, tag):
    """The three context calls every library has (fslog/FORMAT.md, "Context records"):
    define(role, module, op, site, backward) -> id, set_context(id), tag(ptr, device, role, id)."""
    c = ctypes
    define.argtypes = [c.c_int, c.c_char_p, c.c_char_p, c.c_char_p, c.c_int]
    define.restype = c.c_uint32
    set_context.argtypes = [c.c_uint32]
    set_context.restype = None
    tag.argtypes = [c.c_void_p, c.c_int, c.c_int, c.c_uint32]
    tag.restype = c.c_int


def encode(value):
    return None if value is None else value.encode()


def preload():
    """The interposer's C API if this process runs under LD_PRELOAD=libfragscope_preload.so, else
    None; looked up and declared once (a preloaded library is there from the process's start)."""
    with lock:
        if PRELOAD not in libs:
            process = ctypes.CDLL(None)
            found = hasattr(process, "fragscope_preload_mode")
            if found:
                declare(process, PRELOAD)
            libs[PRELOAD] = process if found else None
        return libs[PRELOAD]


def preload_mode():
    """"observe", "cache" or "off" under LD_PRELOAD=libfragscope_preload.so, else None."""
    process = preload()
    return process.fragscope_preload_mode().decode() if process else None


def torch_mismatch():
    """Why libfragscope_torch.so cannot serve the running torch, or None when it can."""
    try:
        directory = lib_dir()
    except FileNotFoundError as e:
        return str(e)
    if not os.path.isfile(os.path.join(directory, TORCH)):
        return f"{directory} has no {TORCH} (fragscope was built without LibTorch)"
    import torch  # LibTorch's libraries, which libfragscope_torch.so links by name, are now loaded

    running = torch.__version__.split("+")[0]
    info = build_info()
    # Checked before loading: a library built for another torch may not even load.
    built = info.get("torch_version") if info else load(TORCH).fragscope_torch_version().decode()
    if built != running:
        return (f"{os.path.join(directory, TORCH)} was built against torch {built}, this process "
                f"runs torch {torch.__version__}: reinstall fragscope with this torch present "
                "(pip install --force-reinstall --no-cache-dir <fragscope source>)")
    return None


def torch_lib_if_compatible():
    """libfragscope_torch.so when it exists and was built for the running torch, else None."""
    return None if torch_mismatch() else load(TORCH)
