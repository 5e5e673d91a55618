"""cuBLAS's and cuBLASLt's workspaces as PyTorch 2.11 allocates them (aten/src/ATen/cuda/
CublasHandlePool.cpp): one block per (handle, stream) from the caching allocator, made at the
handle's first GEMM on that stream and kept in a map until torch._C._cuda_clearCublasWorkspaces()
clears both maps (inductor's CUDA graph trees call it around each warm-up and recording, so that
a capture's GEMMs take their workspace inside the graph's pool). The handle is per thread: the
autograd engine's device thread runs backward with its own."""

import os
import threading

import torch

from .roles import WORKSPACES

aten = torch.ops.aten

# GEMMs that take a cuBLAS handle (and so its workspace) on the current stream.
GEMMS = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default,
         aten.addmm_.default, aten.addbmm.default, aten._addmm_activation.default,
         aten.mm.out, aten.addmm.out, aten.bmm.out, aten.baddbmm.out}


def cublas_workspace_bytes(gpu):
    """torch 2.11's cuBLAS workspace size: CUBLAS_WORKSPACE_CONFIG (":SIZE_KIB:COUNT" pairs),
    else 32 MiB on compute capability 9.0 and later, 4096 KiB x 2 + 16 KiB x 8 before."""
    config = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    if config:
        total = 0
        parts = [p for p in config.split(":") if p]
        for size, count in zip(parts[0::2], parts[1::2]):
            total += int(size) * 1024 * int(count)
        if total:
            return total
    if gpu.capability >= (9, 0):
        return 4096 * 1024 * 8
    return 4096 * 1024 * 2 + 16 * 1024 * 8


def cublaslt_workspace_bytes():
    """CUBLASLT_WORKSPACE_SIZE (KiB), else 1 MiB."""
    return int(os.environ.get("CUBLASLT_WORKSPACE_SIZE", "1024")) * 1024


def _uses_cublaslt(func, args):
    """addmm(bias, a, b) with a bias vector and beta 1 runs cuBLASLt's GEMM with a bias epilogue;
    also as inductor's wrapper calls it, into its buffer (addmm.out: an H100 recording of a
    compiled MLP takes the cuBLASLt workspace there)."""
    if func not in (aten.addmm.default, aten.addmm.out, aten._addmm_activation.default):
        return False
    bias = args[0]
    return isinstance(bias, torch.Tensor) and bias.dim() == 1


class Workspaces:
    """The workspace maps of one prediction: (thread, stream) -> the block's address."""

    def __init__(self, session, gpu):
        self.session = session
        self.gpu = gpu
        self.cublas = {}
        self.cublaslt = {}

    def take(self, func, args, stream):
        """What a GEMM `func` on `stream` allocates: its handle's workspace, the first time."""
        handle = (threading.get_ident(), stream)
        if handle not in self.cublas:
            self.cublas[handle] = self.session.malloc(cublas_workspace_bytes(self.gpu), stream,
                                                      WORKSPACES)
        if _uses_cublaslt(func, args) and handle not in self.cublaslt:
            self.cublaslt[handle] = self.session.malloc(cublaslt_workspace_bytes(), stream,
                                                        WORKSPACES)

    def clear(self):
        """torch._C._cuda_clearCublasWorkspaces: every workspace block freed, in map order
        (std::map over (handle, stream) pointers: here the order they were made)."""
        for blocks in (self.cublas, self.cublaslt):
            for ptr in blocks.values():
                self.session.free(ptr)
            blocks.clear()
