"""Tensor and sequence parallelism of a Hugging Face Llama-family model in fragscope.predict, as
torchtitan applies them (torchtitan/models/llama3/infra/parallelize.py, apply_tp): one rank of the
"tp" dimension of the job's DeviceMesh, with FSDP2 over "dp" when the job has one
(parallel.py).

The plan (torch.distributed.tensor.parallel.parallelize_module), by the model's module names:
  model.embed_tokens           RowwiseParallel: vocabulary rows sharded, the ids replicated, the
                               output reduce-scattered along the sequence (Shard(1))
  layers.N.input_layernorm,    SequenceParallel: weights replicated, each rank normalises its
  layers.N.post_attention_     part of the sequence
  layernorm, model.norm
  layers.N.self_attn           PrepareModuleInput: hidden_states all-gathered along the sequence
  q_proj, k_proj, v_proj       ColwiseParallel: output features (whole heads) sharded
  o_proj                       RowwiseParallel: input features sharded, the output
                               reduce-scattered along the sequence
  layers.N.mlp                 PrepareModuleInput: its input all-gathered
  gate_proj, up_proj           ColwiseParallel
  down_proj                    RowwiseParallel, reduce-scattered along the sequence
  lm_head                      ColwiseParallel: its input all-gathered, the logits sharded along
                               the vocabulary (loss parallel: the cross-entropy under
                               torch's loss_parallel(), as torchtitan's default)

One difference from torchtitan, which changes no allocation: between the blocks torchtitan passes
local tensors (use_local_output=True), whose sequence dimension is the local one; a transformers
model reads the sequence length from the embedding's output (its position ids and masks) and adds
the residuals in the decoder layer, so the embedding's, o_proj's and down_proj's outputs stay
DTensors (sharded along the sequence, of the global shape). Their local tensors are the same.

The attention's view (batch, seq, -1, head_dim) of q_proj's local output takes the local heads, so
the number of heads and of key/value heads must be multiples of tp (fewer key/value heads than tp
would need them replicated on several ranks, which the plan does not do: refused, as the
estimator's training layouts refuse it); the sequence must divide by tp (torchtitan's check, for
the sequence sharding).
"""

import contextlib

from .errors import PredictionError

# The decoder layer's modules the plan places.
_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP = ("gate_proj", "up_proj", "down_proj")
_LAYER_NORMS = ("input_layernorm", "post_attention_layernorm")


def check(cfg, tp, seq):
    """ValueError when a Llama-family config `cfg` cannot be split over `tp` ranks at `seq`: the
    heads, the key/value heads, the MLP's width and the sequence must divide by tp; tied
    embeddings (the embedding sharded by rows and lm_head by columns would share one weight) are
    not planned."""
    heads = getattr(cfg, "num_attention_heads", None)
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    if heads is None:
        raise ValueError(f"tp {tp}: the config has no num_attention_heads (tensor parallelism is "
                         "planned for Llama-family models)")
    if heads % tp:
        raise ValueError(f"tp {tp} does not divide num_attention_heads {heads}: each rank "
                         "computes whole heads")
    if kv_heads % tp:
        more = (" (fewer key/value heads than ranks would need them replicated on each rank, "
                "which the plan does not do)" if kv_heads < tp else "")
        raise ValueError(f"tp {tp} does not divide num_key_value_heads {kv_heads}: each rank "
                         f"computes whole key/value heads{more}")
    ffn = getattr(cfg, "intermediate_size", None)
    if ffn is not None and ffn % tp:
        raise ValueError(f"tp {tp} does not divide intermediate_size {ffn}: gate_proj, up_proj "
                         "and down_proj are split evenly")
    if seq % tp:
        raise ValueError(f"seq {seq} is not a multiple of tp {tp}: sequence parallelism splits "
                         "the sequence over the ranks")
    if getattr(cfg, "tie_word_embeddings", False):
        raise ValueError(f"tp {tp}: tied embeddings (tie_word_embeddings) are not planned: the "
                         "embedding is sharded by rows and lm_head by columns")


def _root_modules(model):
    """The root plan's modules that `model` holds: a pipeline stage (pipeline.split) has the
    embedding on the first stage only, the final norm (not an Identity) and lm_head on the last
    only."""
    import torch

    held = []
    for path in ("model.embed_tokens", "model.norm", "lm_head"):
        try:
            module = model.get_submodule(path)
        except AttributeError:
            continue
        if module is not None and not isinstance(module, torch.nn.Identity):
            held.append(path)
    return held


def _plan_modules(model, stage=False):
    """The decoder layers: PredictionError when `model` is not built as the plan expects (a
    pipeline `stage` may lack the embedding, the final norm and lm_head)."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    missing = []
    held = _root_modules(model)
    for path in ("model.embed_tokens", "model.norm", "lm_head"):
        if path not in held and not stage:
            missing.append(path)
    if layers is None:
        missing.append("model.layers")
    else:
        for child in [f"self_attn.{n}" for n in _ATTENTION] + [f"mlp.{n}" for n in _MLP] \
                + list(_LAYER_NORMS):
            try:
                layers[0].get_submodule(child)
            except AttributeError:
                missing.append(f"model.layers.0.{child}")
        # A layer's other weights (Gemma 2's extra norms) would meet the sharded sequence with
        # plain tensors.
        planned = {"self_attn", "mlp", *_LAYER_NORMS}
        unplanned = [f"model.layers.0.{name}" for name, child in layers[0].named_children()
                     if name not in planned and any(True for _ in child.parameters())]
        if unplanned:
            raise PredictionError(f"tensor parallelism: {type(model).__name__} has weights the "
                                  f"Llama plan does not place: {', '.join(unplanned)}")
    if missing:
        raise PredictionError(f"tensor parallelism is planned for Llama-family models "
                              f"(q/k/v/o_proj, gate/up/down_proj, embed_tokens, norms, lm_head); "
                              f"{type(model).__name__} has no {', '.join(missing)}")
    return layers


def parallelize(model, tp_mesh, stage=False):
    """`model` (a transformers causal LM) split over `tp_mesh` by the plan of the module doc; a
    pipeline `stage` (pipeline.split's causal LM) by the plan of the modules it holds, as
    torchtitan applies its plan to a stage."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel, SequenceParallel,
                                                   parallelize_module)

    layers = _plan_modules(model, stage)
    root = {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(),
                                              output_layouts=Shard(1), use_local_output=False),
        "model.norm": SequenceParallel(),
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1),
                                   use_local_output=False),
    }
    held = _root_modules(model)
    parallelize_module(model, tp_mesh, {k: v for k, v in root.items() if k in held})
    for layer in layers:
        plan = {norm: SequenceParallel() for norm in _LAYER_NORMS}
        # The decoder layer calls self_attn(hidden_states=...) by keyword, mlp(x) by position.
        plan["self_attn"] = PrepareModuleInput(
            input_kwarg_layouts={"hidden_states": Shard(1)},
            desired_input_kwarg_layouts={"hidden_states": Replicate()})
        plan["mlp"] = PrepareModuleInput(input_layouts=(Shard(1),),
                                         desired_input_layouts=(Replicate(),))
        for name in ("q_proj", "k_proj", "v_proj"):
            plan[f"self_attn.{name}"] = ColwiseParallel()
        plan["self_attn.o_proj"] = RowwiseParallel(output_layouts=Shard(1),
                                                   use_local_output=False)
        plan["mlp.gate_proj"] = ColwiseParallel()
        plan["mlp.up_proj"] = ColwiseParallel()
        plan["mlp.down_proj"] = RowwiseParallel(output_layouts=Shard(1), use_local_output=False)
        parallelize_module(layer, tp_mesh, plan)
    return model


@contextlib.contextmanager
def loss_parallel(enabled):
    """The cross-entropy over logits sharded along the vocabulary, forward and backward (torch's
    loss_parallel(), torchtitan's default with tensor parallelism); nothing when not `enabled`."""
    if not enabled:
        yield
        return
    from torch.distributed.tensor.parallel import loss_parallel as torch_loss_parallel

    with torch_loss_parallel():
        yield

