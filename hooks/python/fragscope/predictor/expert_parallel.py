"""Expert parallelism of a transformers mixture-of-experts model in fragscope.predict, as torchtitan
applies it (torchtitan/distributed/expert_parallel.py, ExpertParallel; its FSDP2 in
torchtitan/models/*/infra/parallelize.py): one rank of the "ep" dimension of a ("dp_mod_ep",
"ep") mesh of the world, ep innermost (an expert-parallel group is ep consecutive ranks), the
data-parallel ranks the whole world flattened ("dp"), as torchtitan borrows the expert-parallel
ranks from FSDP's.

The experts: transformers stores a layer's experts as one module (the classes decorated by
use_experts_implementation: Mixtral, Qwen3-MoE, DeepSeek-V3 ...) whose parameters are fused 3-D
tensors, experts first (gate_up_proj [E, 2 x I, H], down_proj [E, H, I], their biases).
ExpertParallel's partition: each parameter distributed Shard(0) over "ep", E / ep experts per rank.
FSDP2 then shards each layer's experts over "dp_mod_ep" (world / ep ranks; on dimension 1 when
dp_mod_ep x ep exceeds E, torchtitan's shard_placement_fn), then the layer and the root over
"dp", with the job's MixedPrecisionPolicy (parallel.wrap).

The experts' forward (replacing transformers' grouped_mm forward on each rank, the same steps
around the dispatch and combine):
  - the (token, choice) pairs sorted by expert, the tokens gathered in that order (T x K rows),
    the tokens per expert counted (histc), as transformers' grouped_mm forward and torchtitan's
    token reorderer do;
  - dispatch (ExpertParallel._token_dispatch): the counts exchanged (all_to_all_single over "ep"),
    then the rows (all_to_all_single_autograd with the splits), then permuted from rank-major to
    expert-major (torchtitan's _permute, no padding);
  - the rank's E / ep experts by grouped GEMMs (transformers' _grouped_linear, the module's
    _apply_gate), the weights' local shards;
  - combine (_token_combine): unpermuted (a new buffer, the rows scattered into it), the rows sent
    back (all_to_all_single_autograd, the splits reversed); then weighted and summed per token.

What the routing decides is data: the splits of the all-to-alls (torchtitan reads them back to the
CPU) depend on the router's choices, which a fake tensor does not have. The prediction assumes them
(`routing`, stated in the prediction's notes): "balanced", each rank sends T x K / ep rows to each
rank and so receives T x K (the router's load balancing aims there); "worst", every rank sends
this rank all the rows its experts can take (T x min(K, E / ep) per sender), the most this rank can
receive. The counts, the rows dispatched and combined, and the rows received are
communication buffers (collectives.py).
"""

import functools
import types

from .errors import PredictionError

ROUTINGS = ("balanced", "worst")


def experts_modules(model):
    """The model's experts modules: transformers' fused experts (use_experts_implementation:
    num_experts and 3-D down_proj)."""
    found = []
    for module in model.modules():
        down = getattr(module, "down_proj", None)
        if (hasattr(module, "num_experts") and hasattr(module, "_apply_gate")
                and getattr(down, "dim", lambda: 0)() == 3):
            found.append(module)
    return found


def check(model, ep):
    """PredictionError when `model` has no fused experts or ep does not divide their number."""
    modules = experts_modules(model)
    if not modules:
        raise PredictionError(f"--ep {ep}: {type(model).__name__} has no mixture-of-experts "
                              "layers with fused experts (transformers' experts modules: "
                              "Mixtral, Qwen3-MoE, DeepSeek-V3 ...)")
    for module in modules:
        if getattr(module, "has_bias", False):
            raise PredictionError(f"--ep {ep}: experts with biases ({type(module).__name__}) "
                                  "are not modeled")
        if module.num_experts % ep:
            raise PredictionError(f"--ep {ep} does not divide the {module.num_experts} experts "
                                  "of a layer: each rank holds experts / ep of them")
    return modules


def splits(tokens, top_k, ep, local_experts, routing):
    """(input_splits, output_splits) of the rows' all-to-all on one rank: the rows it sends to and
    receives from each rank of the group, under `routing` (the module doc)."""
    rows = tokens * top_k
    sent = [rows // ep + (1 if r < rows % ep else 0) for r in range(ep)]
    if routing == "balanced":
        return sent, list(sent)
    if routing == "worst":
        return sent, [tokens * min(top_k, local_experts)] * ep
    raise ValueError(f"routing must be one of {', '.join(ROUTINGS)}, not {routing!r}")


def routing_note(ep, routing):
    """The assumption a prediction with expert parallelism states (Prediction.notes)."""
    if routing == "balanced":
        return (f"expert parallelism over {ep} ranks: balanced routing, each rank receiving as "
                "many (token, expert) rows as it sends, 1 / ep of them from each rank "
                "(--ep-routing worst: the most its experts can receive)")
    return (f"expert parallelism over {ep} ranks: worst-case routing, every rank sending this "
            "rank all the (token, expert) rows its experts can take (--ep-routing balanced: "
            "even)")


def parallelize(model, ep_mesh, routing="balanced"):
    """`model`'s experts split over `ep_mesh` (ExpertParallel's partition) and their forward the
    dispatch and combine of the module doc."""
    import torch
    from torch.distributed.tensor import Shard, distribute_tensor

    if routing not in ROUTINGS:
        raise PredictionError(f"routing must be one of {', '.join(ROUTINGS)}, not {routing!r}")
    for module in check(model, ep_mesh.size()):
        for name, param in list(module.named_parameters(recurse=False)):
            module.register_parameter(name, torch.nn.Parameter(
                distribute_tensor(param, ep_mesh, [Shard(0)])))
        module.forward = types.MethodType(
            functools.partial(_forward, ep_mesh=ep_mesh, routing=routing), module)
    return model


def fsdp_placement(module, dp_mod_ep_size, ep):
    """torchtitan's shard_placement_fn of a layer's experts under FSDP2: None (dimension 0) unless
    dp_mod_ep x ep exceeds the experts, then dimension 1."""
    if dp_mod_ep_size * ep <= module.num_experts:
        return None
    from torch.distributed.tensor import Shard

    return lambda param: Shard(1)


def _local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def _forward(module, hidden_states, top_k_index, top_k_weights, *, ep_mesh, routing):
    import torch
    from torch.distributed._functional_collectives import (all_to_all_single,
                                                           all_to_all_single_autograd)
    from transformers.integrations.moe import _grouped_linear

    group = ep_mesh.get_group()
    ep = ep_mesh.size()
    experts = module.num_experts
    local_experts = experts // ep
    tokens, top_k = top_k_index.shape
    # The (token, choice) pairs sorted by expert; the tokens gathered in that order.
    expert_ids = top_k_index.reshape(-1)
    expert_ids_sorted, perm = torch.sort(expert_ids)
    routed_input = hidden_states[perm // top_k]
    weights_sorted = top_k_weights.reshape(-1)[perm]
    with torch.no_grad():
        per_expert = torch.histc(expert_ids_sorted.int(), bins=experts, min=0, max=experts - 1)
        per_expert_group = all_to_all_single(per_expert, None, None, group=group)
        per_expert_group = torch.ops._c10d_functional.wait_tensor(per_expert_group)
    input_splits, output_splits = splits(tokens, top_k, ep, local_experts, routing)
    routed_input = all_to_all_single_autograd(routed_input, output_splits, input_splits, group)
    input_shape, routed_input, permuted, per_local_expert = _permute(
        routed_input, per_expert_group, ep, local_experts)
    offsets = torch.cumsum(per_local_expert, dim=0, dtype=torch.int32)
    gate_up = module.gate_up_proj if module.has_gate else module.up_proj
    out = _grouped_linear(routed_input, _local(gate_up), offsets,
                          is_transposed=module.is_transposed)
    out = module._apply_gate(out) if module.has_gate else module.act_fn(out)
    out = _grouped_linear(out, _local(module.down_proj), offsets,
                          is_transposed=module.is_transposed)
    unpermuted = out.new_empty(input_shape)
    unpermuted[permuted, :] = out
    out = all_to_all_single_autograd(unpermuted, input_splits, output_splits, group)
    out = out * weights_sorted.unsqueeze(-1)
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(perm.size(0), device=perm.device)
    return out[inverse].view(tokens, top_k, -1).sum(dim=1)


def _permute(x, per_expert_group, ep, local_experts):
    """torchtitan's _permute (models/common/moe/utils.py): the rows received, rank-major, put in
    expert-major order for the grouped GEMMs (no padding); (the input shape, the rows, the
    permutation, the rows per local expert)."""
    import torch

    with torch.no_grad():
        starts = per_expert_group.cumsum(0) - per_expert_group
        counts = per_expert_group.view(ep, local_experts)
        per_local_expert = counts.sum(0)
        lens = counts.t().reshape(-1)
        starts = starts.view(ep, local_experts).t().reshape(-1)
        out_starts = lens.cumsum(0) - lens
        out_ends = out_starts + lens
        positions = torch.arange(x.shape[0], device=x.device)
        segment = torch.searchsorted(out_ends, positions, right=True)
        permuted = positions + (starts - out_starts)[segment]
    return x.shape, x[permuted, :], permuted, per_local_expert
