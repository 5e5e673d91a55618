"""One rank of a data-parallel job in fragscope.predict: FSDP2 (fully_shard) or DDP under torch's
fake process group, for world size N and rank r.

The fake process group (torch.testing._internal.distributed.fake_pg) runs every collective as a
no-op on the caller's tensors: what the rank allocates for its collectives is what FSDP2 and DDP
allocate themselves, through the caching allocator, and the prediction records it as on the GPU:
FSDP2's copy-in buffer and all-gather output (on its all-gather copy-in stream), the unsharded
parameters it frees and reallocates (UntypedStorage.resize_), its reduce-scatter input and output
(the output on its reduce-scatter stream); DDP's broadcast buffer and gradient buckets (its C++
Reducer). NCCL's own buffers (its
communicators' channels, ncclMemAlloc) are no caching-allocator allocations and are not recorded.
"""

import collections
import contextlib
import os

from .errors import PredictionError
from .collectives import send_buffers_are_communication
from .ddp import on_the_fake_group as ddp_on_the_fake_group
from .dtensor import on_the_fake_group

PARALLEL = ("fsdp2", "ddp")

# tp: the tensor-parallel size (tensor_parallel.py); pp: the pipeline-parallel size
# (pipeline.py); the data-parallel size is world_size / (pp x tp). ep: the expert-parallel size
# (expert_parallel.py), borrowed from the data-parallel ranks; ep_routing its assumed routing.
# cp: the context-parallel size (context_parallel.py), FSDP2 sharding over dp x cp.
Job = collections.namedtuple(
    "Job", "parallel world_size rank bucket_cap_mb tp pp ep ep_routing cp",
    defaults=(1, 1, 1, "balanced", 1))


def job(parallel=None, world_size=1, rank=0, bucket_cap_mb=None, wrap_required=False,
        flags=False, tp=1, ep=1, ep_routing="balanced", cp=1):
    """The checked rank of a parallel job, or None for a single-GPU job (world size 1, no
    `parallel`, no `tp`). ValueError names the bad value, and the argument as the API spells it
    or, with `flags`, as `python -m fragscope predict`'s flags do (--world-size). `tp`: the
    tensor-parallel size, alone (pure tensor parallelism: the world is tp ranks) or with
    parallel="fsdp2" over world_size / tp data-parallel ranks; world_size None means tp.
    `wrap_required`: a world size above 1 needs `parallel` or `tp` (the standard loop has no
    other way to use the ranks). `ep`: expert parallelism over ep of the fsdp2 ranks, with
    `ep_routing` (expert_parallel.ROUTINGS). `cp`: context parallelism over cp of the fsdp2
    ranks (the world is dp x cp)."""

    def name(arg):
        return "--" + arg.replace("_", "-") if flags else arg

    def setting(arg, value):
        return f"{name(arg)} {value}" if flags else f"{arg}={value!r}"

    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ValueError(f"{name('tp')} must be a positive integer, not {tp!r}")
    if world_size is None:
        world_size = tp
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"{name('world_size')} must be a positive integer, not {world_size!r}")
    if world_size % tp:
        raise ValueError(f"{name('world_size')} {world_size} is not a multiple of "
                         f"{name('tp')} {tp} (the world is data-parallel x tensor-parallel ranks)")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"{name('rank')} must be an integer in [0, {world_size}) for "
                         f"{name('world_size')} {world_size}, not {rank!r}")
    if parallel is not None and parallel not in PARALLEL:
        raise ValueError(f"parallel must be one of {', '.join(PARALLEL)}, not {parallel!r}")
    if tp > 1 and parallel == "ddp":
        raise ValueError(f"{name('tp')} {tp} with {setting('parallel', 'ddp')} is not supported "
                         f"(torchtitan's DDP is one-dimensional): use "
                         f"{setting('parallel', 'fsdp2')} over the data-parallel ranks, or "
                         f"{name('tp')} alone")
    if tp > 1 and parallel is None and world_size > tp:
        raise ValueError(f"{name('world_size')} {world_size} with {name('tp')} {tp} leaves "
                         f"{world_size // tp} data-parallel ranks: they need "
                         f"{setting('parallel', 'fsdp2')}")
    _check_ep(ep, ep_routing, parallel, world_size, tp, name, setting)
    _check_cp(cp, ep, parallel, world_size, tp, name, setting)
    if bucket_cap_mb is not None:
        if parallel != "ddp":
            raise ValueError(f"{name('bucket_cap_mb')} applies to {setting('parallel', 'ddp')} "
                             "only")
        if not isinstance(bucket_cap_mb, (int, float)) or not bucket_cap_mb > 0:
            shown = f"{bucket_cap_mb:g}" if flags else repr(bucket_cap_mb)
            raise ValueError(f"{name('bucket_cap_mb')} must be positive, not {shown}")
    if wrap_required and world_size > 1 and parallel is None and tp == 1:
        other = "ddp" if flags else "'ddp'"
        raise ValueError(f"{name('world_size')} {world_size} needs "
                         f"{setting('parallel', 'fsdp2')} or {other}")
    if parallel is None and world_size == 1 and tp == 1:
        return None
    # None keeps DDP's default: 25 MiB buckets after a first one of 1 MiB (an explicit cap is
    # also the first bucket's).
    return Job(parallel, world_size, rank, None if bucket_cap_mb is None else float(bucket_cap_mb),
               tp, 1, ep, ep_routing, cp)


def _check_cp(cp, ep, parallel, world_size, tp, name, setting):
    """ValueError naming a context-parallel setting that is not modeled."""
    if isinstance(cp, bool) or not isinstance(cp, int) or cp < 1:
        raise ValueError(f"{name('cp')} must be a positive integer, not {cp!r}")
    if cp == 1:
        return
    for other, size in (("tp", tp), ("ep", ep)):
        if size > 1:
            raise ValueError(f"{name('cp')} {cp} with {name(other)} {size} is not modeled: "
                             f"context parallelism is predicted with "
                             f"{setting('parallel', 'fsdp2')} alone")
    if parallel != "fsdp2":
        raise ValueError(f"{name('cp')} {cp} needs {setting('parallel', 'fsdp2')} (torchtitan "
                         "shards the parameters over the data- and context-parallel ranks)"
                         + (f", not {setting('parallel', parallel)}" if parallel else ""))
    if world_size % cp:
        raise ValueError(f"{name('world_size')} {world_size} is not a multiple of {name('cp')} "
                         f"{cp}")


def _check_ep(ep, routing, parallel, world_size, tp, name, setting):
    """ValueError naming an expert-parallel setting that torchtitan's layout does not have."""
    from .expert_parallel import ROUTINGS

    if isinstance(ep, bool) or not isinstance(ep, int) or ep < 1:
        raise ValueError(f"{name('ep')} must be a positive integer, not {ep!r}")
    if routing not in ROUTINGS:
        raise ValueError(f"{name('ep_routing')} must be one of {', '.join(ROUTINGS)}, not "
                         f"{routing!r}")
    if ep == 1:
        return
    if tp > 1:
        raise ValueError(f"{name('ep')} {ep} with {name('tp')} {tp} is not modeled: expert "
                         f"parallelism is predicted with {setting('parallel', 'fsdp2')} alone")
    if parallel != "fsdp2":
        raise ValueError(f"{name('ep')} {ep} needs {setting('parallel', 'fsdp2')} (torchtitan "
                         "borrows the expert-parallel ranks from FSDP's)"
                         + (f", not {setting('parallel', parallel)}" if parallel else ""))
    if world_size % ep:
        raise ValueError(f"{name('world_size')} {world_size} is not a multiple of {name('ep')} "
                         f"{ep}")


def record_keys(rank_job):
    """The model record's layout keys of a rank (model_record.py): tp and sp (sequence
    parallelism, always with tp here) for tensor parallelism; dp and zero for data parallelism
    (zero 3: FSDP2 shards the parameters, gradients and optimizer states over dp; 0: DDP
    replicates them). Empty for a single GPU."""
    if rank_job is None:
        return {}
    keys = {}
    if rank_job.tp > 1:
        keys.update(tp=rank_job.tp, sp=True)
    if rank_job.ep > 1:
        keys.update(ep=rank_job.ep)
    if rank_job.cp > 1:
        keys.update(cp=rank_job.cp)
    if rank_job.parallel is not None:
        keys.update(dp=rank_job.world_size // (rank_job.tp * rank_job.cp),
                    zero=3 if rank_job.parallel == "fsdp2" else 0)
    return keys


@contextlib.contextmanager
def fake_process_group(rank_job):
    """The default process group is torch's fake one for `rank_job` (a Job) while the body runs,
    inside a capture (the simulated device). Yields the world's CUDA device mesh: 1-D without
    tensor or pipeline parallelism (fully_shard without a mesh also uses it), else ("dp", "tp"),
    ("pp", "dp") or ("pp", "dp", "tp") as torchtitan lays it out (pp outermost, tp innermost: a
    tensor-parallel group is tp consecutive ranks, a stage's ranks world / pp consecutive
    ones); with expert parallelism a dict of the meshes "dp_mod_ep" and "ep" (ep innermost) and
    "dp", the two flattened (expert_parallel.py), and "pp" outermost with pipeline parallelism;
    with context parallelism a dict of "cp" (cp
    innermost) and "dp", FSDP2's: the data- and context-parallel ranks flattened."""
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp._fully_shard import _fully_shard
        from torch.testing._internal.distributed.fake_pg import FakeStore
    except ImportError as e:
        raise PredictionError(f"predicting a rank needs torch.distributed with its fake process "
                              f"group: {e}") from e
    if not dist.is_available():
        raise PredictionError("predicting a rank needs torch.distributed (not in this torch)")
    if dist.is_initialized():
        raise PredictionError("a process group is already initialized in this process: the "
                              "prediction of a rank starts its own (fake) one")
    dist.init_process_group("fake", store=FakeStore(), rank=rank_job.rank,
                            world_size=rank_job.world_size)
    dp = rank_job.world_size // (rank_job.tp * rank_job.pp)
    original_default_mesh = _fully_shard._init_default_mesh
    # The log's header takes its rank and world size from these when it opens (at the first
    # allocation), as in a job started by torchrun.
    # FRAGSCOPE_TP_SIZE and FRAGSCOPE_PP_SIZE: the tensor- and pipeline-parallel sizes, so that
    # `fragscope analyze` of the ranks' logs groups them by tensor-parallel group and by stage.
    env = {"RANK": rank_job.rank, "WORLD_SIZE": rank_job.world_size}
    if rank_job.tp > 1:
        env["FRAGSCOPE_TP_SIZE"] = rank_job.tp
    if rank_job.pp > 1:
        env["FRAGSCOPE_PP_SIZE"] = rank_job.pp
    saved_env = {name: os.environ.get(name) for name in env}
    os.environ.update({name: str(value) for name, value in env.items()})
    try:
        # The mesh's rank map is a CPU tensor that the fake mode would make data-less.
        with unset_fake_temporarily():
            dims = [("pp", rank_job.pp), ("dp", dp), ("tp", rank_job.tp)]
            dims = [d for d in dims if d[0] == "dp" or d[1] > 1]
            if rank_job.ep > 1:
                # The experts' ranks: ("dp_mod_ep", "ep"), the data-parallel ones the whole;
                # under pipeline parallelism inside each stage's ranks (pp outermost).
                shape, names = (dp // rank_job.ep, rank_job.ep), ("dp_mod_ep", "ep")
                if rank_job.pp > 1:
                    shape, names = (rank_job.pp, *shape), ("pp", *names)
                root = init_device_mesh("cuda", shape, mesh_dim_names=names)
                experts = root if rank_job.pp == 1 else root["dp_mod_ep", "ep"]
                mesh = {"dp_mod_ep": root["dp_mod_ep"], "ep": root["ep"],
                        "dp": experts._flatten("dp")}
                if rank_job.pp > 1:
                    mesh["pp"] = root["pp"]
            elif rank_job.cp > 1:
                # The sequence's ranks ("cp", innermost); FSDP2's the world ("dp" x "cp").
                root = init_device_mesh("cuda", (dp // rank_job.cp, rank_job.cp),
                                        mesh_dim_names=("dp", "cp"))
                mesh = {"cp": root["cp"], "dp": root._flatten("dp_cp")}
            elif len(dims) > 1:
                mesh = init_device_mesh("cuda", tuple(n for _, n in dims),
                                        mesh_dim_names=tuple(name for name, _ in dims))
            else:
                mesh = init_device_mesh("cuda", (rank_job.world_size,))
        _fully_shard._init_default_mesh = lambda mesh_dim_names=None: (
            mesh["dp"] if len(dims) > 1 or isinstance(mesh, dict) else mesh)
        with ddp_on_the_fake_group(), on_the_fake_group(), send_buffers_are_communication():
            yield mesh
    finally:
        _fully_shard._init_default_mesh = original_default_mesh
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        dist.destroy_process_group()


def transformer_blocks(model):
    """The modules FSDP2 shards one by one: a Hugging Face model's blocks (the classes its
    _no_split_modules names), else the items of the model's longest nn.ModuleList."""
    import torch

    names = set(getattr(model, "_no_split_modules", None) or [])
    blocks = [m for m in model.modules() if type(m).__name__ in names]
    if blocks:
        return blocks
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    return list(max(lists, key=len)) if lists else []


def mixed_precision(param_dtype):
    """FSDP2's MixedPrecisionPolicy of the standard recipe (torchtitan): parameters all-gathered
    and computed in `param_dtype`, gradients reduced in fp32; None for fp32 training."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if param_dtype is None:
        return None
    return MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)


def build(make_model, rank_job, mesh, blocks=None, param_dtype=None, compile_mode=None):
    """make_model()'s module made one rank of `rank_job` (wrap). fsdp2 is initialised as
    torchtitan does it: the model built on the meta device, sharded, then materialised on the GPU
    (`to_empty`), so that the device never holds the whole model: here the model is built and
    sharded with nothing recorded, and then each parameter's local shard and each buffer is
    allocated in to_empty's order (_to_empty_order). ddp: the model is built on the device (DDP
    broadcasts it from there) and wrapped, all recorded. Tensor parallelism (with fsdp2 or
    alone) is initialised as fsdp2 is: each parameter's local shard allocated. compile_mode:
    each block compiled before fully_shard (wrap)."""
    if rank_job.parallel != "fsdp2" and rank_job.tp == 1:
        return wrap(make_model(), rank_job, mesh, blocks, param_dtype, compile_mode)
    from .kernels import untracked

    with untracked():
        model = wrap(make_model(), rank_job, mesh, blocks, param_dtype, compile_mode)
    materialize([model])
    return model


def materialize(modules):
    """Allocates the local shards and buffers of `modules`, built with nothing recorded, as
    Module.to_empty on the device would (_to_empty_order); a storage two of them share is
    allocated once and then reallocated, as to_empty's second visit does."""
    from .active import reallocate, track

    seen = set()
    for module in modules:
        for tensor in _to_empty_order(module):
            storage = getattr(tensor, "_local_tensor", tensor).untyped_storage()
            if storage._cdata in seen:
                reallocate(storage)
            else:
                seen.add(storage._cdata)
                track(storage)


def _to_empty_order(module):
    """The tensors Module.to_empty materialises, in its order (Module._apply: the children first,
    then the module's own parameters and buffers). A parameter two modules share (tied embeddings)
    comes once per module: the second time, a new tensor is made and swapped in (DTensor
    parameters are swapped, not assigned), and the first one's memory is freed (an H100 log of
    FSDP2's GPT-2: the embedding shard allocated again after the last block, then freed)."""
    for child in module.children():
        yield from _to_empty_order(child)
    yield from (p for p in module._parameters.values() if p is not None)
    yield from (b for b in module._buffers.values() if b is not None)


def wrap(model, rank_job, mesh, blocks=None, param_dtype=None, compile_mode=None):
    """`model` (on the simulated device) made one rank of `rank_job`: with tensor parallelism
    first split over the mesh's "tp" dimension (tensor_parallel.parallelize); fsdp2:
    fully_shard on each block (`blocks`, default transformer_blocks(model)) and then on the
    root, with mixed_precision(param_dtype), over the data-parallel ranks; with expert
    parallelism the experts first split over "ep" (expert_parallel.parallelize), and each
    block's experts sharded over "dp_mod_ep" before the block; ddp: DistributedDataParallel
    with the job's bucket cap. compile_mode (fsdp2, tp): each block replaced by
    torch.compile(block, mode=compile_mode) after tensor parallelism and before fully_shard, as
    torchtitan's apply_compile (block_compile.py). Returns the module the steps call."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise PredictionError(f"parallel={rank_job.parallel!r} wraps an nn.Module; the model "
                              f"function returned {type(model).__name__}")
    if rank_job.parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, bucket_cap_mb=rank_job.bucket_cap_mb)  # None: 25
    if rank_job.tp > 1:
        from .tensor_parallel import parallelize

        parallelize(model, mesh["tp"])
        if rank_job.parallel is None:
            if compile_mode is not None:
                from .block_compile import compiled_blocks

                compiled_blocks(model, transformer_blocks(model) if blocks is None else blocks,
                                compile_mode)
            return model
        mesh = mesh["dp"]
    experts = {}
    if rank_job.cp > 1:
        mesh = mesh["dp"]
    if rank_job.ep > 1:
        from . import expert_parallel

        expert_parallel.parallelize(model, mesh["ep"], rank_job.ep_routing)
        experts_mesh, mesh = mesh["dp_mod_ep"], mesh["dp"]
        experts = {id(m): m for m in expert_parallel.experts_modules(model)}
    from torch.distributed.fsdp import fully_shard

    policy = mixed_precision(param_dtype)
    options = {"mesh": mesh} if policy is None else {"mesh": mesh, "mp_policy": policy}
    blocks = transformer_blocks(model) if blocks is None else list(blocks)
    if not blocks:
        raise PredictionError("fsdp2: the model has no transformer blocks to shard (no "
                              "_no_split_modules, no nn.ModuleList): pass blocks")
    if compile_mode is not None:
        from .block_compile import compiled_blocks

        blocks = compiled_blocks(model, blocks, compile_mode)
    for block in blocks:
        for module in block.modules():
            if id(module) in experts:
                placement = expert_parallel.fsdp_placement(module, experts_mesh.size(),
                                                           rank_job.ep)
                fully_shard(module, **dict(options, mesh=experts_mesh),
                            shard_placement_fn=placement)
        fully_shard(block, **options)
    fully_shard(model, **options)
    return model
