"""What the CUDA kernels decide and allocate that a fake tensor does not show (fragscope.predict).

Recorder is the TorchDispatchMode of a capture: it sees every op below autograd (after autocast
and the CompositeImplicit decompositions, as the CUDA kernels do), allocates each new storage of
its outputs from fragscope's allocator, and adds the kernels' own allocations:
  - the cuBLAS workspace (one per handle and stream, kept) and the cuBLASLt workspace (at the
    first GEMM that runs through cuBLASLt: addmm with a bias vector), cublas.py;
  - the SDPA backend: aten._fused_sdp_choice is answered as PyTorch 2.11's CUDA selection would
    on the target GPU (flash, then memory-efficient, then math; the torch.backends.cuda switches
    and sdpa_kernel() respected), so that the kernel that runs, and what it saves for backward
    (flash and memory-efficient keep the log-sum-exp, not the s x s scores), is the GPU's;
  - embedding backward's sort and partial sums over more than 3072 indices
    (embedding_backward_steps);
  - the metadata buffer of the multi-tensor copies around FSDP2's collectives
    (copy_metadata);
  - the functional collectives' outputs, with the communication role (collectives).
"""

import contextlib
import threading

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from . import active, collectives, context, copy_metadata, reductions
from .cublas import GEMMS, Workspaces
from .device import current_stream_handle
from .roles import WORKSPACES

aten = torch.ops.aten

_MATH, _FLASH, _EFFICIENT = 0, 1, 2

@torch.compiler.assume_constant_result
def _sdp_backends():
    """The SDPA backends in priority order, each with whether it is enabled; a constant to
    dynamo, which cannot trace these builtins: under torch.compile the chosen backend's op is
    traced into the graph, as the composite's choice on the GPU puts it there (compile.py)."""
    backends = torch.backends.cuda
    enabled = {_FLASH: backends.flash_sdp_enabled(),
               _EFFICIENT: backends.mem_efficient_sdp_enabled(),
               _MATH: backends.math_sdp_enabled()}
    return [(b, enabled.get(b, False)) for b in torch._C._get_sdp_priority_order()]


def sdp_choice(gpu, args, kwargs):
    """The backend PyTorch 2.11 picks for scaled_dot_product_attention on `gpu` (an int of
    torch.nn.attention.SDPBackend)."""
    names = ["query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"]
    p = dict(zip(names, args))
    p.update(kwargs)
    q, k, v = p["query"], p["key"], p["value"]
    mask = p.get("attn_mask")
    head = q.size(-1)
    dims_ok = q.dim() == 4 and k.dim() == 4 and v.dim() == 4
    same_head = head == k.size(-1) == v.size(-1)
    strides_ok = all(t.stride(-1) == 1 for t in (q, k, v))
    half = q.dtype in (torch.float16, torch.bfloat16)
    # check_batch_size_and_num_heads_dense: equal head counts, or (flash only, enable_gqa) key
    # and value heads that divide the query's.
    heads_q, heads_k, heads_v = q.size(-3), k.size(-3), v.size(-3)
    same_heads = heads_q == heads_k == heads_v
    grouped = bool(p.get("enable_gqa")) and heads_k == heads_v and heads_q % heads_k == 0
    for backend, enabled in _sdp_backends():
        if backend == _FLASH and enabled:
            if (gpu.capability >= (8, 0) and half and mask is None and dims_ok and same_head
                    and strides_ok and head <= 256 and head % 8 == 0
                    and (same_heads or grouped)):
                return _FLASH
        elif backend == _EFFICIENT and enabled:
            align = 8 if half else 4
            if (q.dtype in (torch.float16, torch.bfloat16, torch.float32) and dims_ok
                    and strides_ok and head % align == 0 and v.size(-1) % align == 0
                    and same_heads):
                return _EFFICIENT
        elif backend == _MATH and enabled:
            return _MATH
    raise RuntimeError("No available kernel for scaled_dot_product_attention on "
                       f"{gpu.name}: every backend is disabled or unsupported for these inputs")


def _autocast(tensors):
    """`tensors` (SDPA's query, key, value and mask) as CUDA autocast's lower-precision rule passes
    them to the op: each floating CUDA tensor but a float64 one cast to the autocast dtype
    (cached_cast), the casts made from the last argument to the first (the C++ wrapper's casts are
    the arguments of one call, which GCC evaluates right to left: an H100 log shows value's and
    key's casts before query's)."""
    if not torch.is_autocast_enabled("cuda"):
        return tensors
    dtype = torch.get_autocast_dtype("cuda")
    out = list(tensors)
    for i in reversed(range(len(out))):
        t = out[i]
        if (isinstance(t, torch.Tensor) and t.device.type == "cuda" and t.is_floating_point()
                and t.dtype not in (torch.float64, dtype)):
            out[i] = t.to(dtype)
    return out


def scaled_dot_product_attention(gpu, original):
    """torch.nn.functional.scaled_dot_product_attention as it runs on `gpu`.

    PyTorch's composite picks the backend in C++ (a DispatchStub that a fake tensor cannot
    reach: on a machine without a GPU it falls back to math), so the choice is made here with
    sdp_choice() and the chosen backend's op is called, as the composite does; math stays the
    composite's own path."""

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
             enable_gqa=False):
        if query.device.type != "cuda":
            return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                            is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
        query, key, value, attn_mask = _autocast((query, key, value, attn_mask))
        choice = sdp_choice(gpu, (query, key, value, attn_mask, dropout_p, is_causal, scale,
                                  enable_gqa), {})
        # Flash takes fewer key/value heads as they are (grouped-query attention); the
        # memory-efficient kernel is not chosen for them, and math repeats them itself.
        if choice == _FLASH:
            return aten._scaled_dot_product_flash_attention(
                query, key, value, dropout_p, is_causal, False, scale=scale)[0]
        if choice == _EFFICIENT:
            need_lse = torch.is_grad_enabled() and any(
                t.requires_grad for t in (query, key, value))
            return aten._scaled_dot_product_efficient_attention(
                query, key, value, attn_mask, need_lse, dropout_p, is_causal, scale=scale)[0]
        return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                        is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)

    # Its name is the original's: code that replaces the function by name in
    # torch.nn.functional (context parallelism's ring attention) replaces this one.
    sdpa.__name__ = sdpa.__qualname__ = original.__name__
    return sdpa


def _grouped_mm_strides_ok(name, t):
    """check_valid_strides_and_return_transposed of ATen's GroupedMMUtils.h: row- or column-major
    in the last two dimensions, the other stride a multiple of 16 bytes."""
    alignment = 16 // t.element_size()
    rows, cols = t.size(-2), t.size(-1)
    row_stride, col_stride = t.stride(-2), t.stride(-1)
    if row_stride == 1 and col_stride >= max(1, rows):
        ok = col_stride % alignment == 0
    elif col_stride == 1 and row_stride >= max(1, cols):
        ok = row_stride % alignment == 0
    else:
        raise RuntimeError(f"_grouped_mm: invalid strides/sizes, got {list(t.stride())} for "
                           f"strides and {list(t.shape)} for sizes of {name}")
    if not ok:
        raise RuntimeError(f"_grouped_mm: strides of {name} should be multiple of 16 bytes")


def _grouped_mm_groups(a, b, offs):
    if a.dim() == 2:
        return offs.size(0) if b.dim() == 2 else b.size(0)
    return a.size(0)


def grouped_mm(gpu, args, kwargs):
    """aten._grouped_mm as torch 2.11's CUDA kernel runs it (GroupedBlas.cpp, _grouped_mm_cuda):
    (output, scratch bytes): the output a fake tensor of the kernel's shape, dtype and padded
    strides, or None where the meta function's output is the kernel's; scratch the bytes the
    kernel allocates after its output and frees before it returns.

    The meta function accepts bf16 operands only; the kernel accepts fp32, fp16 and bf16. Under
    autocast a mixture-of-experts layer's operands are fp32 (_grouped_mm has no autocast rule, and
    transformers casts the input to the fp32 weights' dtype): the kernel then takes its fallback,
    one mm_out per group into the output, which allocates nothing else. bf16 operands and output
    on compute capability 9.x or 10.x take CUTLASS's grouped GEMM, which also allocates its
    argument buffer (the A, B and output pointers, the strides and the problem shapes of each
    group); its CUTLASS workspace (0 for the persistent grouped kernel without split-K) is not
    modeled."""
    import torch

    names = ["self", "mat2", "offs", "bias", "out_dtype"]
    p = dict(zip(names, args))
    p.update(kwargs)
    a, b, offs, bias, out_dtype = (p.get(n) for n in names)
    accepted = (torch.float32, torch.float16, torch.bfloat16)
    for name, t in (("mat_a", a), ("mat_b", b)):
        if t.dtype not in accepted:
            raise RuntimeError(f"_grouped_mm: expected {name} to be Float32, BFloat16 or Float16, "
                               f"got {t.dtype}")
        if t.dim() not in (2, 3):
            raise RuntimeError(f"_grouped_mm: {name} has to be 2 or 3d")
        _grouped_mm_strides_ok(name, t)
    if (a.dim() == 3 or b.dim() == 3) and a.size(-1) != b.size(-2):
        raise RuntimeError("_grouped_mm: contraction dimension of mat_a and mat_b must match")
    if (offs is not None) != (a.dim() == 2 or b.dim() == 2):
        raise RuntimeError("_grouped_mm: have to provide offsets if there is a 2d matrix, or no "
                           "offset if both matrices are 3d")
    if offs is not None and (offs.dim() != 1 or offs.dtype != torch.int32):
        raise RuntimeError("_grouped_mm: offs has to be a 1D int32 tensor")
    if bias is not None:
        raise RuntimeError("_grouped_mm: bias not supported yet")
    dtype = out_dtype or a.dtype
    if dtype != a.dtype:
        raise RuntimeError("_grouped_mm: grouped gemm output dtype must match `mat_a` dtype")
    if b.dtype != a.dtype:
        raise RuntimeError(f"_grouped_mm: expected mat_a and mat_b to have the same dtype, got "
                           f"{a.dtype} and {b.dtype}")
    if a.dtype == torch.bfloat16:
        # The meta function's output is the kernel's; CUTLASS's path adds its argument buffer.
        if gpu.capability[0] not in (9, 10):
            return None, 0
        groups = _grouped_mm_groups(a, b, offs)
        aligned = (groups + 1) // 2 * 2  # the pointer arrays start 16-byte aligned
        return None, aligned * 3 * 8 + groups * 12 + 3 * groups * 8
    if a.dim() == 2:
        size = [offs.size(0), a.size(0), b.size(1)] if b.dim() == 2 else [a.size(0), b.size(-1)]
    else:
        size = [a.size(1), b.size(1)] if b.dim() == 2 else [a.size(0), a.size(1), b.size(-1)]
    alignment = 16 // dtype.itemsize
    padded = (size[-1] + alignment - 1) // alignment * alignment
    stride = [padded, 1] if len(size) == 2 else [size[1] * padded, padded, 1]
    return torch.empty_strided(size, stride, dtype=dtype, device=a.device), 0


# Flash attention's forward on the GPU: the philox seed and offset (8 bytes each, device tensors,
# saved for backward; meta tensors under the fake mode) come before the output, with dropout (a
# GPT-2 on an H200) and without (a Mistral-like model on an H100), and a 256-byte scratch buffer
# is allocated and freed after it (torch 2.11).
_FLASH_SCRATCH_BYTES = 256


def flash_backward_scratch_bytes(query, key):
    """Flash attention's backward allocates one fp32 buffer after dq, dk and dv and frees it
    before it returns: the softmax row sums (batch x heads x seq) and the dq accumulator
    (batch x seq x heads x head dim), with fewer key/value heads (grouped-query attention) also
    dk's and dv's accumulators (batch x seq x key heads x head dim each), and 256 bytes. Fitted to
    torch 2.11 on an H200 (head dim 64, sequences 96, 256 and 384, dropout on) and, with grouped
    heads, on an H100 (16 query and 8 key heads, head dim 64, sequence 1024: there the
    accumulators' bytes equal dq's, so a form in query heads would fit too); other head dims and
    sequence roundings are not confirmed by a recorded trace."""
    batch, heads, seq, head_dim = query.shape
    grouped = 2 * 4 * batch * key.size(-2) * key.size(-3) * head_dim if key.size(-3) != heads else 0
    return 4 * batch * heads * seq + 4 * batch * seq * heads * head_dim + grouped + 256


# Indices per partial sum in embedding backward (NROWS_PER_THREAD, EmbeddingBackwardKernel.cu).
_EMBEDDING_ROWS_PER_PARTIAL = 10
# Embedding.cu's direct kernel (no sort) serves up to this many indices.
_EMBEDDING_DIRECT_MAX_INDICES = 3072


def embedding_backward_steps(grad, indices, scale_grad_by_freq=False):
    """What embedding_dense_backward's CUDA path (Embedding.cu, EmbeddingBackwardKernel.cu)
    allocates around its output, in order: ("alloc", name, bytes), ("free", name) and ("output",);
    what is still allocated at the end is freed in reverse order. For n indices of a row width w:
    the sorted indices and their original positions (n each), the sort's value input (n, freed
    before the output), then the segment offsets (n), their count (8), unique_by_key's unused keys
    output (n, freed at once), the partials per segment and their offsets (n each), the
    partial-segment count (8), the partial-segment offsets (n // 10 + n, a bound that needs no
    sync) and their fp32 sums ((n // 10 + n) x w; double for double grads). Matched to torch 2.11
    on an H100 (4096 int64 indices, widths 768 and 1024: every size and the order). cub's temporary
    storage (the sort's, unique_by_key's and exclusive_sum's: 83,455, 1,279 and 1,279 bytes at
    4096 int64 indices) is not modeled: its size follows cub's tuning. With scale_grad_by_freq the
    counts per index (n) come after the sort (its scans' temporary storage not modeled); up to
    3072 indices without it the kernel sums directly and allocates nothing but its output."""
    n = indices.numel()
    if n <= _EMBEDDING_DIRECT_MAX_INDICES and not scale_grad_by_freq:
        return [("output",)]
    index = n * indices.element_size()
    partials = n // _EMBEDDING_ROWS_PER_PARTIAL + n
    acc = 8 if grad.dtype == torch.float64 else 4
    return [("alloc", "sorted", index), ("alloc", "positions", index), ("alloc", "range", index),
            ("free", "range")] + ([("alloc", "count", index)] if scale_grad_by_freq else []) + [
            ("output",), ("alloc", "segments", index), ("alloc", "segment_count", 8),
            ("alloc", "unique_keys", index), ("free", "unique_keys"),
            ("alloc", "partials", index), ("alloc", "partial_offsets", index),
            ("alloc", "partial_count", 8),
            ("alloc", "partial_starts", partials * indices.element_size()),
            ("alloc", "partial_sums", partials * grad.shape[-1] * acc)]


# Ops whose CUDA kernel allocates its outputs in another order than it returns them: dropout
# makes its mask before its output (Dropout.cu).
_OUTPUT_ORDER = {aten.native_dropout.default: (1, 0)}


# Ops run only to learn their outputs' metadata (DTensor's sharding propagation runs the op on
# fake tensors of the global shape) allocate nothing on the GPU: the Recorder lets them through
# while this thread's depth is positive (untracked()).
metadata_only = threading.local()


@contextlib.contextmanager
def untracked():
    """The ops of the block allocate nothing: they only build metadata (DTensor's sharding
    propagation, a 4-bit model's build, a CUDA graph replay's rebuilt outputs)."""
    metadata_only.depth = getattr(metadata_only, "depth", 0) + 1
    try:
        yield
    finally:
        metadata_only.depth -= 1


def _wraps_tensors(args, kwargs):
    """Whether an argument is a traceable wrapper subclass (DTensor)."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    return any(isinstance(a, torch.Tensor) and is_traceable_wrapper_subclass(a)
               for a in tree_flatten((args, kwargs))[0])


class Recorder(TorchDispatchMode):
    """Allocates every new CUDA storage an op produces, plus the kernels' workspaces."""

    def __init__(self, session, gpu):
        super().__init__()
        self.session = session
        self.gpu = gpu
        session.workspaces = Workspaces(session, gpu)
        # The storage use count of a fake tensor that shares its storage with no other tensor
        # (a fake tensor and the meta tensor it wraps); made under the fake mode, not recorded.
        probe = torch.empty(1, device="cuda")
        self.unshared_storage_count = torch._C._storage_Use_Count(probe.untyped_storage()._cdata)

    @classmethod
    def ignore_compile_internals(cls):
        """torch.compile compiles under the Recorder (dynamo skips a frame under a mode that says
        False): off while dynamo traces and inductor compiles, on while the compiled code runs,
        which allocates its buffers through it (compile.py); while compile support is off,
        dynamo runs the frames eagerly."""
        return active.compile_support

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(metadata_only, "depth", 0):
            return func(*args, **kwargs)
        # The allocations the op makes name it (context.py).
        with context.op(self.session.contexts, func._schema.name):
            return self._dispatch(func, args, kwargs)

    def _dispatch(self, func, args, kwargs):
        if _wraps_tensors(args, kwargs):
            # A tensor subclass that wraps others (DTensor: FSDP2's sharded parameters) holds no
            # memory of its own: NotImplemented lets its dispatch run, with this mode on the
            # stack, the op on the local tensors, which allocate.
            return NotImplemented
        if func.namespace == collectives.NAMESPACE:
            return collectives.dispatch(self.session, func, args, kwargs,
                                        current_stream_handle())
        if func is aten._fused_sdp_choice.default:
            return sdp_choice(self.gpu, args, kwargs)
        if func is aten.embedding_dense_backward.default:
            return self._embedding_backward(func, args, kwargs)
        scratch = 0
        out = None
        if func is aten.add.Tensor and self._accumulates_in_place(args, kwargs):
            out = aten.add_.Tensor(args[0], args[1])
        elif func is aten._grouped_mm.default:
            out, scratch = grouped_mm(self.gpu, args, kwargs)
        if out is None:
            out = func(*args, **kwargs)
        stream = current_stream_handle()
        if func is aten._scaled_dot_product_flash_attention.default:
            self._flash_forward(args, kwargs, out, stream)
            return out
        outputs = tree_flatten(out)[0]
        for index in _OUTPUT_ORDER.get(func, range(len(outputs))):
            t = outputs[index]
            if isinstance(t, torch.Tensor) and t.device.type == "cuda":
                self.session.track(t.untyped_storage(), stream)
        if func in GEMMS:
            self.session.workspaces.take(func, args, stream)
        scratch = scratch or copy_metadata.metadata_bytes(self.gpu, func, args, kwargs,
                                                          out)
        if scratch:
            self.session.free(self.session.malloc(scratch, stream, WORKSPACES))
        if func in reductions.REDUCTIONS:
            staging = reductions.scratch(
                self.gpu, args, kwargs, acc_bytes=8 if args[0].dtype == torch.float64 else 4)
            if staging:
                buffer = self.session.malloc(staging[0], stream, WORKSPACES)
                self.session.free(self.session.malloc(staging[1], stream, WORKSPACES))
                self.session.free(buffer)
        elif func is aten._scaled_dot_product_flash_attention_backward.default:
            workspace = flash_backward_scratch_bytes(args[1], args[2])
            self.session.free(self.session.malloc(workspace, stream, WORKSPACES))
        return out

    def _accumulates_in_place(self, args, kwargs):
        """Whether this add is the autograd engine's accumulation of two gradients that the GPU
        does in place (InputBuffer's accumulate: old_var.add_(var) when grad mode is off and the
        engine holds the last reference to old_var and to its storage). Under the fake mode the
        engine always adds out of place (a fake tensor is a tensor subclass), which allocates a
        gradient-sized tensor the GPU does not."""
        if torch.is_grad_enabled() or torch._C._current_graph_task_id() == -1:
            return False
        if len(args) != 2 or kwargs.get("alpha", 1) != 1:
            return False
        old, new = args
        if not (isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor)) or old is new:
            return False
        if old.shape != new.shape or old.dtype != new.dtype or old.device != new.device:
            return False
        from torch._prims_common import is_non_overlapping_and_dense_or_false as dense

        # Both are in the engine's hands alone when their reference counts match (the dispatch
        # adds the same references to each); old's storage must be its own.
        return (dense(old) and old._use_count() <= new._use_count()
                and torch._C._storage_Use_Count(old.untyped_storage()._cdata)
                == self.unshared_storage_count)

    def _embedding_backward(self, func, args, kwargs):
        stream = current_stream_handle()
        live, out = {}, None
        scale_grad_by_freq = args[4] if len(args) > 4 else kwargs.get("scale_grad_by_freq", False)
        for step in embedding_backward_steps(args[0], args[1], scale_grad_by_freq):
            if step[0] == "alloc":
                live[step[1]] = self.session.malloc(step[2], stream)
            elif step[0] == "free":
                self.session.free(live.pop(step[1]))
            else:
                out = func(*args, **kwargs)
                self.session.track(out.untyped_storage(), stream)
        for buffer in reversed(list(live.values())):
            self.session.free(buffer)
        return out

    def _flash_forward(self, args, kwargs, out, stream):
        attention, logsumexp, seed, offset = out[0], out[1], out[6], out[7]
        for t in (seed, offset):
            self.session.track(t.untyped_storage(), stream, size=8)
        self.session.track(attention.untyped_storage(), stream)
        self.session.track(logsumexp.untyped_storage(), stream)
        self.session.free(self.session.malloc(_FLASH_SCRATCH_BYTES, stream, WORKSPACES))
