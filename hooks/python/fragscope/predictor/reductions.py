"""The global-memory scratch of PyTorch's CUDA reduction kernels (fragscope.predict).

A TensorIterator reduction (sum, mean over some dimensions) that splits each output across
several thread blocks allocates, after its output, a staging buffer and a semaphore array from
the caching allocator and frees both when the kernel has been launched (gpu_reduce_kernel in
ATen's Reduce.cuh). Whether it does, and how large they are, follows from the launch
configuration (setReduceConfig), which depends on the shapes, the strides and the GPU's
multiprocessors; this module computes it for the reductions across rows (the reduced dimensions
are not the fastest-moving ones: the bias gradients of linear layers, sum over batch and
sequence), the ones a training step runs on large inputs. A reduction along the fastest-moving
dimension (a full sum, a row sum) is not modeled: its configuration differs (vectorized along the
input) and no recorded trace confirms it.
"""

import torch

from .device import max_threads_per_multiprocessor

aten = torch.ops.aten

# The reductions whose kernels are gpu_reduce_kernel with a float accumulator for floating inputs.
REDUCTIONS = {aten.sum.dim_IntList, aten.mean.dim}

_MAX_NUM_THREADS = 512
_WARP = 32
_MIN_VALUES_PER_THREAD = 16
_MAX_VALUES_PER_THREAD = 256


def _div_up(a, b):
    return (a + b - 1) // b


def _last_pow2(n):
    return 1 << (max(1, n).bit_length() - 1)


def _iterator(shape, strides, reduced):
    """TensorIterator's view of a reduction of an input (shape, strides in elements) over the
    dimensions `reduced`: size-1 dimensions dropped, reduced dimensions first, each group by
    ascending input stride, adjacent dimensions coalesced. [(size, stride)], reduce count."""
    dims = [(shape[d], strides[d], d in reduced) for d in range(len(shape)) if shape[d] != 1]
    dims.sort(key=lambda x: (not x[2], x[1]))
    merged = []
    for size, stride, is_reduced in dims:
        if merged and merged[-1][2] == is_reduced and merged[-1][0] * merged[-1][1] == stride:
            merged[-1] = (merged[-1][0] * size, merged[-1][1], is_reduced)
        else:
            merged.append((size, stride, is_reduced))
    return [(s, st) for s, st, _ in merged], sum(1 for m in merged if m[2])


def _output_vec_size(dims, reduce_count, offset):
    """get_output_vec_size: 4, halved until it divides the input's element offset, the output
    extent of the fastest output dimension and every other input stride."""
    vec = 4

    def fit(n):
        nonlocal vec
        while vec > 1 and n % vec:
            vec //= 2

    fit(offset)
    fit(dims[reduce_count][0])
    for i, (_, stride) in enumerate(dims):
        if i != reduce_count:
            fit(stride)
    return vec


def scratch(gpu, args, kwargs, acc_bytes=4):
    """(buffer bytes, semaphore bytes) that the CUDA kernel of a sum or mean over dimensions of
    args[0] allocates after its output, or None when it allocates nothing (or the case is not
    modeled)."""
    x = args[0]
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.numel() == 0:
        return None
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    if dim is None or (isinstance(dim, (list, tuple)) and not dim):
        return None  # a full reduction: along the fastest-moving dimension
    ndim = x.dim()
    reduced = {d % ndim for d in (dim if isinstance(dim, (list, tuple)) else [dim])}
    dims, reduce_count = _iterator(list(x.shape), list(x.stride()), reduced)
    if reduce_count == 0 or reduce_count == len(dims):
        return None
    if dims[0][1] < dims[reduce_count][1] or dims[reduce_count][1] != 1:
        return None  # along the fastest-moving dimension, or no contiguous output dimension
    num_outputs = 1
    for size, _ in dims[reduce_count:]:
        num_outputs *= size
    inputs_per_output = x.numel() // num_outputs
    out_vec = _output_vec_size(dims, reduce_count, x.storage_offset())
    dim0 = num_outputs // out_vec
    dim1 = inputs_per_output
    # set_block_dimension: at most 512 / output_vec_size threads.
    max_threads = _MAX_NUM_THREADS // out_vec
    dim0_pow2 = _last_pow2(dim0) if dim0 < max_threads else max_threads
    dim1_pow2 = _last_pow2(dim1) if dim1 < max_threads else max_threads
    width = min(dim0_pow2, _WARP)
    height = min(dim1_pow2, max_threads // width)
    width = min(dim0_pow2, max_threads // height)
    threads = width * height
    step_output = width  # the output split across a warp's lanes
    step_input = 1
    values = _div_up(inputs_per_output, step_input)
    if values < min(height * 16, _MAX_VALUES_PER_THREAD):
        return None  # each warp its own outputs: no inter-block reduction
    step_input *= height
    values = _div_up(inputs_per_output, step_input)
    grid_x = _div_up(num_outputs // out_vec, step_output)
    target = gpu.multiprocessors * (max_threads_per_multiprocessor(gpu) // threads)
    if values < _MAX_VALUES_PER_THREAD or grid_x > target:
        return None
    ctas = max(_div_up(values, _MAX_VALUES_PER_THREAD),
               min(_div_up(target, grid_x), _div_up(values, _MIN_VALUES_PER_THREAD)))
    if ctas <= 1:
        return None
    buffer = acc_bytes * num_outputs * ctas * width * out_vec
    return buffer, 4 * grid_x
