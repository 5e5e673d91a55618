"""Replace mode: fragscope's caching allocator as PyTorch's CUDA allocator (use_allocator), or
as the allocator of one torch.cuda.MemPool (pool_allocator, pool_stats, pool_empty_cache)."""

import ctypes
import os

from ._library import ALLOC, encode, lib_dir, load, state, torch_lib_if_compatible, torch_mismatch
from .memory_stats import device_index, replace_stats
from .record import record_model


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

    if state.mode == "replace":
        raise RuntimeError("fragscope's allocator is already installed and initialized")
    if torch.cuda.is_initialized():
        raise RuntimeError(
            "CUDA is already initialized: call fragscope.use_allocator() before the first CUDA "
            "tensor or torch.cuda.init()")
    if via not in ("auto", "torch", "ctypes"):
        raise ValueError(f"via must be auto, torch or ctypes, not {via!r}")
    torch_lib = torch_lib_if_compatible() if via != "ctypes" else None
    if via == "torch" and torch_lib is None:
        raise RuntimeError(torch_mismatch())
    if torch_lib is not None:
        if torch_lib.fragscope_torch_use_allocator(encode(conf), encode(log)) != 0:
            message = torch_lib.fragscope_torch_last_error().decode()
            raise (RuntimeError if "initialized" in message else ValueError)(message)
    else:
        lib = load(ALLOC)
        if lib.fragscope_configure(encode(conf), encode(log)) != 0:
            raise ValueError(lib.fragscope_last_error().decode())
        pluggable = torch.cuda.memory.CUDAPluggableAllocator(
            os.path.join(lib_dir(), ALLOC), "fragscope_malloc", "fragscope_free")
        raw = pluggable.allocator()

        def address(fn):
            return ctypes.cast(fn, ctypes.c_void_p).value

        raw.set_init_fn(address(lib.fragscope_init))
        raw.set_reset_fn(address(lib.fragscope_empty_cache))
        raw.set_memory_fraction_fn(address(lib.fragscope_set_memory_fraction))
        raw.set_record_stream_fn(address(lib.fragscope_record_stream))
        torch.cuda.memory.change_current_allocator(pluggable)
    state.mode = "replace"
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

    if state.mode == "replace":
        raise RuntimeError(
            "fragscope.use_allocator() already makes fragscope every allocation's allocator; a "
            "pool allocator would add nothing")
    if state.pool is not None:
        return state.pool.allocator()
    lib = load(ALLOC)
    if lib.fragscope_configure(encode(conf), encode(log)) != 0:
        raise ValueError(lib.fragscope_last_error().decode())
    pluggable = torch.cuda.memory.CUDAPluggableAllocator(
        os.path.join(lib_dir(), ALLOC), "fragscope_malloc", "fragscope_free")
    state.pool = pluggable
    return pluggable.allocator()


def pool_stats(device=None):
    """torch.cuda.memory_stats()-style statistics of the memory fragscope gave a MemPool
    (pool_allocator()): its segments, as fragscope allocated them."""
    if state.pool is None:
        raise RuntimeError("no fragscope pool allocator: call fragscope.pool_allocator() first")
    return replace_stats(device_index(device))


def pool_empty_cache():
    """Returns the segments a MemPool gave back to fragscope (pool_allocator()) to the device."""
    if state.pool is not None:
        load(ALLOC).fragscope_empty_cache()
