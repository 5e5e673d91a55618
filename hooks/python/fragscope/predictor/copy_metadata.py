"""The device metadata of ATen's multi-tensor copy kernels (fragscope.predict).

split_with_sizes_copy.out and _chunk_cat (and .out), the copies around FSDP2's collectives (its
all-gather's copy-out into the unsharded parameters, its reduce-scatter's copy-in of the
gradients), run one CUDA kernel over all the tensors when they are dense. The kernel reads its
per-tensor addresses, sizes and block map from a device buffer: int64 vectors packed into a pinned
host tensor and copied to the device (pack_vecs in ATen's cuda/TensorShape.cu), allocated from
the caching allocator after the op's outputs and freed when the op returns. A fake tensor shows
none of it; one such buffer per all-gather and per reduce-scatter (14,280 and 28,320 bytes for a
GPT-2 block at world size 4 on an H100).

metadata_bytes(gpu, func, args, kwargs, result) is the buffer's size for an op, 0 for an op
without one.
"""

import math

import torch

from .device import max_threads_per_multiprocessor

aten = torch.ops.aten

# TensorShape.cu's launch constants: 128 threads per block, 16 bytes per thread and iteration.
_BLOCK_SIZE = 128
_BYTES_PER_THREAD = 16
_BYTES_PER_BLOCK = _BLOCK_SIZE * _BYTES_PER_THREAD
_INT64 = 8


def _div_up(a, b):
    return (a + b - 1) // b


def _dense(t):
    from torch._prims_common import is_non_overlapping_and_dense_or_false

    return is_non_overlapping_and_dense_or_false(t)


def split_with_sizes_copy_bytes(gpu, source, split_sizes, dim, out):
    """split_with_sizes_copy_out_cuda: with `source` and every `out` dense and of its dtype, the
    kernel's packed vectors: the destination and source addresses and the chunk size of each split
    (3 n), the block-to-split map (one per block of the jagged grid, whose blocks each copy up to
    16 bytes x 128 threads x iters_per_chunk of a chunk) and the blocks' running sum (n + 1).
    iters_per_chunk grows once the first chunk's blocks x chunks exceed twice the device's resident
    blocks (multiprocessors x max threads per multiprocessor / 128)."""
    if not _dense(source) or any(not _dense(t) or t.dtype != source.dtype for t in out):
        return 0  # the composite implementation: one copy per split, no metadata
    dim = dim % source.dim()
    stride, element = source.stride(dim), source.element_size()
    chunk_sizes = [size * stride * element for size in split_sizes]
    num_chunks = source.numel() // math.prod(source.shape[dim:]) if source.numel() else 0
    first_blocks = sum(_div_up(c, _BYTES_PER_BLOCK) for c in chunk_sizes)
    max_blocks = int(gpu.multiprocessors * max_threads_per_multiprocessor(gpu) / _BLOCK_SIZE * 2.0)
    iter_factor = _div_up(first_blocks * num_chunks, max_blocks)
    blocks = 0  # nothing to copy: no blocks
    if iter_factor:
        chunks_per_block = min(math.ceil(math.sqrt(iter_factor)), num_chunks)
        iters_per_chunk = _div_up(iter_factor, chunks_per_block)
        blocks = sum(_div_up(c, _BYTES_PER_BLOCK * iters_per_chunk) for c in chunk_sizes)
    n = len(split_sizes)
    return _INT64 * (3 * n + blocks + n + 1)


def chunk_cat_bytes(tensors, dim, num_chunks, out):
    """_chunk_cat_out_cuda: with every input and `out` dense, and the inputs bf16 into an fp32
    `out` or of its dtype, the kernel's packed vectors: the block-to-tensor map (one per 2 KiB of
    each tensor's padded chunk, in `out`'s element size) and six per-tensor vectors. The source
    read for this module packs five per-tensor vectors and two of n + 1 (sources, start bytes,
    start blocks, actual sizes, padded chunk sizes, blocks per chunk); torch 2.11's buffers on an
    H100 are one int64 per tensor larger, for 12 tensors (28,320 bytes) and for 4 (154,080), so
    the size here is the measured one."""
    if not tensors or not _dense(out) or any(not _dense(t) for t in tensors):
        return 0
    src = tensors[0].dtype
    if not ((src == torch.bfloat16 and out.dtype == torch.float32) or src == out.dtype):
        return 0  # the composite implementation
    dim = dim % tensors[0].dim()
    blocks = 0
    for t in tensors:
        padded = _div_up(t.shape[dim], num_chunks) * num_chunks
        trailing = math.prod(t.shape[dim + 1:])
        blocks += _div_up(padded * trailing * out.element_size() // num_chunks, _BYTES_PER_BLOCK)
    n = len(tensors)
    return _INT64 * (blocks + 6 * n + 2)


def _arguments(func, args, kwargs):
    """The op's arguments in its schema's order, defaults filled in."""
    given = dict(zip((a.name for a in func._schema.arguments), args))
    given.update(kwargs)
    return [given[a.name] if a.name in given else a.default_value
            for a in func._schema.arguments]


# The ops that run the kernels, by (schema name, overload): ATen's out= overloads and FSDP2's
# custom ops, whose arguments come in the same order (source, split sizes, dim, out / tensors,
# dim, chunks, out), and _chunk_cat, whose CUDA kernel allocates its output and then runs the
# out= one (its output is the result).
_SPLIT_WITH_SIZES_COPY = {("aten::split_with_sizes_copy", "out"),
                          ("fsdp::split_with_sizes_copy", "")}
_CHUNK_CAT = {("aten::_chunk_cat", "out"), ("fsdp::chunk_cat", "")}
_CHUNK_CAT_RESULT = ("aten::_chunk_cat", "")


def metadata_bytes(gpu, func, args, kwargs, result):
    """The metadata buffer `func` (which returned `result`) allocates and frees on the device (0:
    none)."""
    op = (func._schema.name, func._schema.overload_name)
    if op in _SPLIT_WITH_SIZES_COPY:
        return split_with_sizes_copy_bytes(gpu, *_arguments(func, args, kwargs))
    if op in _CHUNK_CAT:
        return chunk_cat_bytes(*_arguments(func, args, kwargs))
    if op == _CHUNK_CAT_RESULT:
        return chunk_cat_bytes(*_arguments(func, args, kwargs), result)
    return 0
