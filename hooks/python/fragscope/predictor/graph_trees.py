"""torch.compile's CUDA graph trees (mode="reduce-overhead": torch/_inductor/cudagraph_trees.py)
in a prediction: PyTorch's own tree manager runs, and what it asks of the GPU, the caching
allocator and the CUDA tensors' addresses is answered here (patches(), which compile.compilable
puts in place with its own, and SETTINGS, inductor's).

On the GPU, the manager keeps one private pool per device and thread (graph_pool_handle(), held
by an empty graph captured into it), and each compiled function goes through it in three
phases: its first call runs eagerly *into that pool* (warm-up: beginAllocateCurrentThreadToPool),
the next records a CUDA graph into the same pool (its non-static inputs first copied into
buffers of the pool, its outputs left live there), and later calls replay the graph -- nothing
allocated -- and hand out outputs rebuilt on the recorded addresses (storages without a
deleter). A forward's graph and its backward's share the pool as a parent and its child; when a
new step begins while outputs of the last are still referenced, their storages are freed
under them (dealloc_current_path_weakrefs). Around each warm-up and recording, the cuBLAS
workspaces are cleared (clear_cublas_manager: cuda_graphs.simulated answers it), so that the
capture's GEMMs take theirs in the pool.

Answered here, since each needs a GPU, the CUDA caching allocator or a real device address:
  - a CUDA tensor's and storage's data_ptr(): the address of the storage's block in the
    simulated allocator (capture._Session.live), or the address a rebuilt output aliases; 0 for
    an empty storage, as on the GPU. The manager tells storages apart and checks its static
    inputs by these addresses.
  - beginAllocateCurrentThreadToPool / endAllocateToPool / releasePool: the pool calls of the C
    ABI (fragscope_alloc.h). PyTorch's filter takes the requests of the calling thread; here those
    of the current stream, which the manager has made its own stream for the block (the calls
    run under torch.cuda.stream(manager.stream)).
  - _construct_storage_from_data_pointer and _construct_CUDA_Tensor_From_Storage_And_Metadata (a
    replay's outputs): a fake storage known to the Recorder but never allocated, aliasing the
    recorded address, and a fake tensor on it.
  - _free_And_Remove_DeleterFn (an overwritten output): its block freed now, its storage kept
    with the same address and never freed again.
  - _tensors_data_ptrs_at_indices_equal: the same comparison on these addresses.
  - cuDNN's benchmark-cache switch and the allocator's history flag: plain values (no cuDNN
    benchmark runs; no history is recorded).
  - inductor's triton.slow_path_cudagraph_asserts off: they compare the allocator's snapshot of
    the pool with the live storages, a check that changes nothing.
Not predicted (PredictionError naming it): a recording that must first restore the allocator's
pool to a checkpoint (setCheckpointPoolState: a new graph recorded while the tree replays,
e.g. after a shape change or a function first called after others were recorded).
"""

from . import cuda_graphs
from .device import current_stream_handle
from .errors import PredictionError
from .kernels import untracked


class _Checkpoint:
    """_cuda_getCheckpointState's answer: the pool it was taken of. Restoring it is not
    predicted."""

    def __init__(self, pool):
        self.pool = pool


def _not_predicted(*args, **kwargs):
    raise PredictionError(
        "torch.compile mode reduce-overhead: a CUDA graph recorded while the graph tree replays "
        "(the allocator's pool restored to a checkpoint: setCheckpointPoolState) is not "
        "predicted; each compiled function must be warmed up and recorded in the order the "
        "steps call them")


def _pool_call(name, pool, *extra):
    state = cuda_graphs._running()
    state.call(getattr(state.session.lib, name), *(int(v) for v in pool), *extra)


# inductor's settings for the graph trees of a prediction (see the module doc).
SETTINGS = {"triton.slow_path_cudagraph_asserts": False}


def patches(session):
    """(object, name, value) for each answer of the module doc, on the simulated device of
    `session` (capture._Session)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor, disable_fake_tensor_cache

    def address(key):  # a storage's _cdata
        ptr = session.live.get(key)
        return ptr if ptr is not None else session.aliases.get(key, 0)

    flags = {"conv_benchmark_empty_cache": True}
    storage_data_ptr = torch.UntypedStorage.data_ptr

    def untyped_data_ptr(storage):
        if storage.device.type in ("meta", "cuda"):
            return address(storage._cdata)
        return storage_data_ptr(storage)

    def tensor_data_ptr(t):
        base = address(t.untyped_storage()._cdata)
        return base + t.storage_offset() * t.element_size() if base else 0

    def storage_from_address(ptr, device, nbytes):
        with untracked():
            storage = torch.empty(int(nbytes), dtype=torch.uint8, device=device).untyped_storage()
        session.track(storage, size=0)  # known to the Recorder, never allocated
        session.aliases[storage._cdata] = int(ptr)
        return storage

    def tensor_on_storage(metadata, storage):
        with untracked():
            t = torch.empty(0, dtype=metadata["dtype"], device=metadata["device"])
            # Not through the fake mode's dispatch cache: its key would keep the storage alive.
            with disable_fake_tensor_cache(t.fake_mode):
                t.set_(storage, metadata["storage_offset"], metadata["size"], metadata["stride"])
        return t

    def free_under(key):  # the storage's _cdata; the storage stays tracked, freed already
        ptr = session.live.pop(key, None)
        if ptr is not None:
            session.free(ptr)
            session.aliases[key] = ptr

    def pointers_equal(tensors, pointers, indices):
        return all(tensor_data_ptr(tensors[i]) == pointers[i] for i in indices)

    def set_conv_cache(value):
        flags["conv_benchmark_empty_cache"] = bool(value)

    C = torch._C
    return [
        (torch.UntypedStorage, "data_ptr", untyped_data_ptr),
        (FakeTensor, "data_ptr", tensor_data_ptr),
        (C, "_cuda_beginAllocateCurrentThreadToPool", lambda device, pool: _pool_call(
            "fragscope_begin_allocate_to_pool", pool, current_stream_handle())),
        (C, "_cuda_endAllocateToPool",
         lambda device, pool: _pool_call("fragscope_end_allocate_to_pool", pool)),
        (C, "_cuda_releasePool", lambda device, pool: _pool_call("fragscope_release_pool", pool)),
        (C, "_construct_storage_from_data_pointer", storage_from_address),
        (C, "_construct_CUDA_Tensor_From_Storage_And_Metadata", tensor_on_storage),
        (C, "_free_And_Remove_DeleterFn", free_under),
        (C, "_tensors_data_ptrs_at_indices_equal", pointers_equal),
        (C, "_cuda_get_conv_benchmark_empty_cache", lambda: flags["conv_benchmark_empty_cache"]),
        (C, "_cudnn_set_conv_benchmark_empty_cache", set_conv_cache),
        (C, "_cuda_isHistoryEnabled", lambda: False),
        (C, "_cuda_getCheckpointState", lambda device, pool: _Checkpoint(pool)),
        (C, "_cuda_setCheckpointPoolState", _not_predicted),
        (C, "_cuda_cudaCachingAllocator_raw_delete", _not_predicted),
    ]
