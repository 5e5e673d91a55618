"""torch.compile of each transformer block of a parallel rank, as torchtitan's apply_compile
(torchtitan/models/llama3/infra/parallelize.py) applies it: after tensor parallelism and
before fully_shard, each block is replaced in its parent by `torch.compile(block)` (an
OptimizedModule, registered under the block's name), and FSDP2 then shards that module. So
FSDP2's hooks sit on the OptimizedModule, outside the compiled region: its pre-forward
all-gather and post-forward reshard (and their backward counterparts) run eagerly around each
block's compiled forward and backward, as in the real job; what the compiled region sees of the
parameters is the unsharded tensors FSDP2 swapped in. PyTorch decides the rest (compile.py).

Whole-model compile (`model = torch.compile(model)`) stays what --compile means for one GPU;
per-block compile is what it means under --parallel fsdp2.
"""

import contextlib
import warnings

from .errors import PredictionError

# Why compile is not predicted with a layout, by the setting's name as predict_hf spells it
# (the CLI's flag without its dashes).
REFUSED = {
    # Tried: with DDP's forward active, dynamo hands each compiled block's graph to its
    # DDPOptimizer (torch/_dynamo/backends/distributed.py, torchtitan's "ddp_optimizer"), which
    # splits it at DDP's gradient buckets; on the fake process group its tracing fails
    # (InternalTorchDynamoError: `tensor` needs to be a `FakeTensor` wrapped by this instance of
    # Dynamo), and an explicit bucket cap under 1 MiB fails its first-bucket assertion.
    "ddp": "DDP hands each compiled graph to dynamo's DDPOptimizer (split at its gradient "
           "buckets), whose tracing fails on the fake process group; use --parallel fsdp2",
    # Not tried: the experts' own fully_shard inside each block would put FSDP2's hooks inside
    # the compiled region, and context parallelism's ring attention dispatches SDPA itself.
    "ep": "per-block compile is predicted with FSDP2 and tensor parallelism only (the "
          "experts' fully_shard inside a compiled block is not modeled)",
    "cp": "per-block compile is predicted with FSDP2 and tensor parallelism only (ring "
          "attention under dynamo is not modeled)",
}


def compiled_blocks(model, blocks, mode="default"):
    """Replaces each of `blocks` (modules of `model`) in its parent by torch.compile(block,
    mode=mode), as torchtitan does (register_module under the block's name); returns the
    compiled modules in the order of `blocks`, which fully_shard is then applied to."""
    import torch

    parents = {}
    for parent in model.modules():
        for name, child in parent.named_children():
            parents.setdefault(id(child), (parent, name))
    compiled = []
    for block in blocks:
        if id(block) not in parents:
            raise PredictionError(f"compile per block: {type(block).__name__} is not a child "
                                  "module of the model")
        parent, name = parents[id(block)]
        wrapper = torch.compile(block, mode=mode)
        parent.register_module(name, wrapper)
        compiled.append(wrapper)
    return compiled


@contextlib.contextmanager
def unwarned():
    """OptimizedModule.__call__ warns at each call while any global module hook is registered
    (such hooks fire once more, for the wrapper): here those are the predictor's own
    (location.py, context.py), not the job's, so the warning is silenced while the block runs."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there "
                                r"are global hooks")
        yield
