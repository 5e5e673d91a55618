"""The GPT-2 training loop the GPU validation runs: a transformers GPT-2 with random
initialization, AdamW, variable sequence lengths, seeded and deterministic, so that runs under
different allocators can be compared loss for loss. Imported by modes_check.py; needs torch and
transformers only when called.
"""
import os
import random
import time

# GPT-2 small (124M) shape; the oracle traces use fewer layers to keep snapshots under 1 MB.
GPT2_SMALL = {"n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_positions": 1024}
SEQ_CHOICES = (128, 256, 384, 512)


def deterministic(torch):
    """Same seed, same algorithms: identical losses across allocators are the expected outcome.

    CUBLAS_WORKSPACE_CONFIG must be set before the first cuBLAS handle; the callers set it in the
    environment before importing torch as well (set here for direct use)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    # warn_only: an op without a deterministic kernel warns (in the run's log) instead of
    # ending the run; the loss comparison then shows whether it mattered.
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def build(torch, layers=None, attn="eager", seed=0):
    """A randomly initialized GPT2LMHeadModel on the GPU. attn="eager" keeps every kernel
    deterministic (SDPA's memory-efficient backward is not)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    shape = dict(GPT2_SMALL)
    if layers:
        shape["n_layer"] = layers
    torch.manual_seed(seed)
    config = GPT2Config(**shape, attn_implementation=attn)
    return GPT2LMHeadModel(config).cuda(), config


def batches(steps, batch, vocab, seed=1):
    """(seq, ids) per step: seeded sequence lengths and token ids, on the CPU."""
    import torch

    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        seq = rng.choice(SEQ_CHOICES)
        out.append((seq, torch.randint(0, vocab, (batch, seq), generator=gen)))
    return out


def train(torch, model, data, mark=None, bf16=True, lr=1e-4):
    """Trains on data (from batches()); returns per-step losses and per-step wall seconds (each
    step ends with loss.item(), which synchronizes)."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses, seconds = [], []
    for step, (seq, ids) in enumerate(data):
        if mark is not None:
            mark(f"step {step} seq {seq}")
        t0 = time.perf_counter()
        ids = ids.cuda(non_blocking=False)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        seconds.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return losses, seconds
