"""Observe mode: PyTorch's own allocator logged into .fslog files, its behaviour unchanged."""

from ._library import TORCH, encode, load, state, torch_mismatch
from .record import record_model


def observe(log=None, model=None, **job):
    """Logs PyTorch's own allocator into .fslog files (mode 2, observe); no behaviour change.

    log: path pattern, %p pid, %r rank, %d device (None: FRAGSCOPE_LOG). Initializes CUDA.
    model (optional): the job's model for the analyzer's footprint verdict, as record_model()
    takes it, with its job keys (seq=, micro_batch=, ...).
    """
    import torch

    mismatch = torch_mismatch()
    if mismatch:
        raise RuntimeError(f"fragscope.observe needs {TORCH}: {mismatch}")
    lib = load(TORCH)
    torch.cuda.init()
    if lib.fragscope_torch_observe(encode(log or "")) != 0:
        raise RuntimeError(lib.fragscope_torch_last_error().decode())
    state.observing = True
    if model is not None:
        record_model(model, **job)
