"""One rank of a pipeline-parallel job in fragscope.predict: a Hugging Face Llama-family model
split by decoder layers into stages, run by torch.distributed.pipelining (PipelineStage and
ScheduleGPipe, Schedule1F1B or ScheduleInterleaved1F1B) under torch's fake process group, as
torchtitan runs it (torchtitan/distributed/pipeline_parallel.py).

The split (torchtitan's pipeline_module_split): the whole model is built with nothing recorded
(torchtitan builds it on the meta device), each stage a deep copy pruned to its modules (the first
keeps the embedding, the last the final norm and lm_head, each its contiguous share of the decoder
layers), then the stage's parameters and buffers are allocated in Module.to_empty's order, so that
the rank allocates its own stages' weights only. gpipe and 1f1b: one
stage per rank (stage r on rank r); interleaved-1f1b: two stages per rank, looped (rank r holds
stages r and r + pp), torchtitan's default for looped schedules. Each rank's step is a batch of
microbatches x micro_batch sequences, split by the schedule; the last stage computes the loss
(transformers' causal-LM loss of each microbatch's logits), and backward runs in the schedule's
order, so the stage holds each microbatch's saved activations from its forward to its backward as
the schedule does (GPipe: all the microbatches' before the first backward; 1F1B: at most pp - r
on rank r).

The P2P sends and receives complete as no-ops on the fake group. What the rank allocates for them
is what PipelineStage allocates itself on the first step (_prepare_forward_infra and
_prepare_backward_infra): one receive buffer per microbatch for the previous stage's activation
(all but the first stage) and one per microbatch for the next stage's gradient (all but the last
stage), kept for the job; they have the communication role. Shape inference by P2P (the default
when PipelineStage gets no shapes) would receive the previous stage's shapes as an object, which
the fake group cannot: each stage gets its input and output shapes (input_args, output_args),
which changes no allocation (they are meta tensors).

Refused: tied embeddings (the first and last stages would share a weight). Assumed: the autocast
dtype for the compute with fp32 weights (torchtitan's autocast when no FSDP runs the mixed
precision); the hidden states passed between stages are fp32 (the residual stream of fp32 weights
under autocast). With data parallelism (FSDP2 over a ("pp", "dp") mesh: pipeline_loop.py)
the stages compute in FSDP2's param_dtype and pass it. With tensor parallelism (a ("pp", "dp",
"tp") mesh) each stage's modules are split by tensor_parallel.py's plan after the split, and the
stages pass the local seq / tp positions of their hidden states (torchtitan's local outputs).
Not modeled: pipeline parallelism with DDP or context parallelism, zero-bubble schedules, uneven
splits. Expert parallelism splits each stage's experts over its data-parallel ranks
(pipeline_loop._build_stages).
"""

import collections
import contextlib
import copy
import warnings

from .errors import PredictionError

SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b")

# rank: the rank in the world; pp_rank: its rank in its pipeline (rank // (dp x tp): pp
# outermost, as torchtitan lays out its mesh); dp: the data-parallel size (FSDP2 over each
# stage); tp: the tensor-parallel size (each stage's layers split by torchtitan's plan).
Plan = collections.namedtuple("Plan", "pp schedule microbatches rank stages layers dp pp_rank tp",
                              defaults=(1,))


def stages_per_rank(schedule):
    """The stages one rank holds: 2 for the looped (interleaved) schedule, else 1."""
    return 2 if schedule == "interleaved-1f1b" else 1


def plan(cfg, pp, schedule, microbatches, rank, world_size=None, parallel=None, tp=1):
    """The checked Plan of rank `rank` (its stage indices, and each stage's decoder layers as
    (start, stop)); ValueError names the bad value. microbatches None: the number of stages
    (pp x stages per rank, the fewest that keep every stage busy). world_size (default pp x tp):
    pp x dp x tp ranks, the dp ones sharded by FSDP2 (parallel "fsdp2", needed when dp > 1), the
    tp ones splitting each stage's layers (tensor_parallel.py)."""
    if isinstance(pp, bool) or not isinstance(pp, int) or pp < 2:
        raise ValueError(f"--pp must be an integer of at least 2, not {pp!r}")
    if schedule not in SCHEDULES:
        raise ValueError(f"--pp-schedule must be one of {', '.join(SCHEDULES)}, not {schedule!r}")
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ValueError(f"--tp must be a positive integer, not {tp!r}")
    world_size = pp * tp if world_size is None else world_size
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size % (pp * tp):
        within = f"--pp {pp} x --tp {tp}" if tp > 1 else f"--pp {pp}"
        raise ValueError(f"--world-size {world_size} is not a multiple of {within} (the world "
                         "is pipeline x data-parallel x tensor-parallel ranks)")
    if parallel not in (None, "fsdp2"):
        raise ValueError(f"--pp with --parallel {parallel} is not modeled (torchtitan shards each "
                         "stage with FSDP2): use --parallel fsdp2")
    if world_size > pp * tp and parallel is None:
        raise ValueError(f"--world-size {world_size} with --pp {pp}"
                         f"{f' x --tp {tp}' if tp > 1 else ''} leaves "
                         f"{world_size // (pp * tp)} data-parallel ranks: they need "
                         "--parallel fsdp2")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"--rank must be an integer in [0, {world_size}) for --world-size "
                         f"{world_size}, not {rank!r}")
    dp = world_size // (pp * tp)
    pp_rank = rank // (dp * tp)
    per_rank = stages_per_rank(schedule)
    num_stages = pp * per_rank
    if microbatches is None:
        microbatches = num_stages
    if isinstance(microbatches, bool) or not isinstance(microbatches, int) or microbatches < 1:
        raise ValueError(f"--pp-microbatches must be a positive integer, not {microbatches!r}")
    if schedule == "interleaved-1f1b" and microbatches < pp:
        raise ValueError(f"--pp-microbatches {microbatches} is fewer than --pp {pp}: the "
                         "interleaved schedule needs at least one microbatch per rank")
    layers = getattr(cfg, "num_hidden_layers", None)
    if layers is None:
        raise ValueError("pipeline parallelism splits a Llama-family model's decoder layers; "
                         "the config has no num_hidden_layers")
    if layers % num_stages:
        raise ValueError(f"--pp {pp} with --pp-schedule {schedule} makes {num_stages} stages, "
                         f"which do not divide num_hidden_layers {layers}")
    if getattr(cfg, "tie_word_embeddings", False):
        raise ValueError(f"--pp {pp}: tied embeddings (tie_word_embeddings) are not split: the "
                         "first stage's embedding and the last stage's lm_head would share one "
                         "weight")
    per_stage = layers // num_stages
    stages = tuple(pp_rank + k * pp for k in range(per_rank))
    return Plan(pp, schedule, microbatches, rank, stages,
                tuple((s * per_stage, (s + 1) * per_stage) for s in stages), dp, pp_rank, tp)


def _stage_module_class():
    import torch

    class StageModule(torch.nn.Module):
        """One stage of a transformers causal LM pruned to its modules: token ids (the first
        stage) or the hidden states in, the hidden states or (the last stage) the logits out."""

        def __init__(self, causal, first, last):
            super().__init__()
            self.causal = causal
            self.first, self.last = first, last
            # Under tensor parallelism (tensor_parallel.parallelize_stage): the "tp" mesh. The
            # stages pass their local part of the sequence, as torchtitan's do (its blocks'
            # use_local_output); inside, the hidden states are DTensors sharded along it.
            self.tp_mesh = None

        def forward(self, x):
            inner = self.causal.model
            if self.first:
                out = inner(input_ids=x, use_cache=False)
            else:
                if self.tp_mesh is not None:
                    from torch.distributed.tensor import DTensor, Shard

                    x = DTensor.from_local(x, self.tp_mesh, (Shard(1),), run_check=False)
                out = inner(inputs_embeds=x, use_cache=False)
            hidden = out.last_hidden_state
            if self.last:
                return self.causal.lm_head(hidden)
            return hidden.to_local() if self.tp_mesh is not None else hidden

    return StageModule


def split(model, stage, num_stages, layers):
    """A deep copy of `model` (on the meta device) pruned to stage `stage`: its decoder layers
    `layers` (start, stop), the embedding on the first stage, the final norm and lm_head on the
    last (torchtitan's pipeline_module_split)."""
    import torch

    for path in ("model.embed_tokens", "model.norm", "model.layers", "lm_head"):
        try:
            model.get_submodule(path)
        except AttributeError as e:
            raise PredictionError(f"pipeline parallelism splits Llama-family models (embed_tokens, "
                                  f"layers, norm, lm_head); {type(model).__name__} has no "
                                  f"{path}") from e
    with warnings.catch_warnings():
        # Deep-copying a fake tensor reads its data pointer (Tensor.__deepcopy__), which the
        # fake tensor warns of; the copy holds no data.
        warnings.simplefilter("ignore", UserWarning)
        part = copy.deepcopy(model, _sharing_fake_modes(model))
    first, last = stage == 0, stage == num_stages - 1
    inner = part.model
    inner.layers = torch.nn.ModuleList(inner.layers[layers[0]:layers[1]])
    if not first:
        inner.embed_tokens = None
    if not last:
        inner.norm = torch.nn.Identity()
        part.lm_head = None
    return _stage_module_class()(part, first, last)


def _sharing_fake_modes(model):
    """A deepcopy memo in which the fake modes of `model`'s tensors (and the one active) copy to
    themselves. A fake tensor's __dict__ names its FakeTensorMode, so a plain deep copy copies the
    mode, and with it the StorageWeakRefs of its converter's constants: each copy releases the
    weak reference it never took (StorageWeakRef has no __deepcopy__; the copy shares `cdata`), and
    the storage's last release then writes into freed memory (glibc's heap, in a later
    prediction). The copied tensors belong to the capture's mode, as the model's do."""
    import torch
    from torch._guards import detect_fake_mode
    from torch._subclasses.fake_tensor import maybe_get_fake_mode

    modes = [detect_fake_mode()]
    for t in (*model.parameters(), *model.buffers()):
        modes.append(maybe_get_fake_mode(t))
    for module in model.modules():
        modes.extend(maybe_get_fake_mode(v) for v in vars(module).values()
                     if isinstance(v, torch.Tensor))
    return {id(mode): mode for mode in modes if mode is not None}


def _schedule_class(schedule):
    from torch.distributed.pipelining import (Schedule1F1B, ScheduleGPipe,
                                              ScheduleInterleaved1F1B)

    return {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B,
            "interleaved-1f1b": ScheduleInterleaved1F1B}[schedule]


def make_schedule(stages, rank_plan, loss_fn):
    """The schedule of the rank's PipelineStage(s), as torchtitan builds it (scale_grads: the
    gradients divided by the number of microbatches after the step)."""
    cls = _schedule_class(rank_plan.schedule)
    if len(stages) == 1:
        return cls(stages[0], n_microbatches=rank_plan.microbatches, loss_fn=loss_fn,
                   scale_grads=True)
    return cls(stages, n_microbatches=rank_plan.microbatches, loss_fn=loss_fn, scale_grads=True)


def pipeline_stages(modules, rank_plan, micro_batch, seq, hidden, vocab, hidden_dtype,
                    logits_dtype, group=None):
    """A PipelineStage per stage module of the rank, with its input and output shapes given (meta
    tensors: shape inference by P2P needs a real peer). Under tensor parallelism the hidden
    states passed are the rank's seq / tp positions; the logits keep their global shape (a
    DTensor sharded along the vocabulary)."""
    import torch
    from torch.distributed.pipelining import PipelineStage

    num_stages = rank_plan.pp * stages_per_rank(rank_plan.schedule)
    meta = torch.device("meta")
    local_seq = seq // rank_plan.tp
    stages = []
    for index, module in zip(rank_plan.stages, modules):
        if index == 0:
            inputs = torch.empty(micro_batch, seq, dtype=torch.long, device=meta)
        else:
            inputs = torch.empty(micro_batch, local_seq, hidden, dtype=hidden_dtype, device=meta)
        if index == num_stages - 1:
            outputs = torch.empty(micro_batch, seq, vocab, dtype=logits_dtype, device=meta)
        else:
            outputs = torch.empty(micro_batch, local_seq, hidden, dtype=hidden_dtype,
                                  device=meta)
        stages.append(PipelineStage(module, index, num_stages, torch.device("cuda"),
                                    input_args=inputs, output_args=outputs, group=group))
    return stages


class ReceiveBuffers:
    """The receive buffers PipelineStage makes (_make_tensor_from_meta: a microbatch's
    activation from the previous stage, its gradient from the next), with the communication
    role, and what autograd saves for backward that is no parameter or receive buffer as saved
    activations. A stage's forward saves its received input (the buffer itself, the leaf of the
    stage's graph), which stays the buffer the stage keeps for the job."""

    def __init__(self):
        self.storages = set()

    @contextlib.contextmanager
    def made(self):
        """Inside capture: the receive buffers made have the communication role."""
        from torch.distributed.pipelining import stage as stage_module

        from .roles import COMMUNICATION, current

        original = stage_module._make_tensor_from_meta

        def make(example, device):
            with current(COMMUNICATION):
                buffer = original(example, device)
            self.storages.add(buffer.untyped_storage()._cdata)
            return buffer

        stage_module._make_tensor_from_meta = make
        try:
            yield
        finally:
            stage_module._make_tensor_from_meta = original

    @contextlib.contextmanager
    def saving_activations(self, parameters):
        """roles.saving_activations, but for the receive buffers."""
        import torch

        from .roles import SAVED_ACTIVATIONS, tag_tensor

        def local(t):
            return getattr(t, "_local_tensor", t)  # a DTensor's (an FSDP2 shard's) own tensor

        keep = {local(p).untyped_storage()._cdata for p in parameters}

        def pack(t):
            if isinstance(t, torch.Tensor) and local(t).device.type == "cuda":
                storage = local(t).untyped_storage()._cdata
                if storage not in keep and storage not in self.storages:
                    tag_tensor(local(t), SAVED_ACTIVATIONS)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield


@contextlib.contextmanager
def marking_chunks(stages, step, marked):
    """Inside: each microbatch's forward and backward on a stage starts a phase
    ("step N / forward M" and "step N / backward M", with "stage S" when the rank holds two),
    so that the phases follow the schedule's order."""
    several = len(stages) > 1
    originals = []
    for stage in stages:
        suffix = f" stage {stage.stage_index}" if several else ""
        forward, backward = stage.forward_one_chunk, stage.backward_one_chunk

        def fwd(chunk, *args, _f=forward, _s=suffix, **kwargs):
            marked(f"step {step} / forward {chunk}{_s}")
            return _f(chunk, *args, **kwargs)

        def bwd(chunk, *args, _b=backward, _s=suffix, **kwargs):
            marked(f"step {step} / backward {chunk}{_s}")
            return _b(chunk, *args, **kwargs)

        stage.forward_one_chunk, stage.backward_one_chunk = fwd, bwd
        originals.append(stage)
    try:
        yield
    finally:
        for stage in originals:
            del stage.forward_one_chunk, stage.backward_one_chunk
