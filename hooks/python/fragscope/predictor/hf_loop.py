"""fragscope.predict_hf: the standard training or inference loop of a Hugging Face model config,
predicted on the simulated GPU (fragscope.predict), with the model recorded in the log.

The loop is the one scripts/gpu/model_oom_check.py runs: the model built on the device, random
token ids of micro_batch x seq, bf16 (or fp16) autocast, loss = model(input_ids, labels).loss,
backward, the optimizer's step, zero_grad(set_to_none=True); markers "step N / forward",
"step N / backward", "step N / optimizer". Inference: the forward under torch.no_grad(), or with
`generate=N` transformers' `generate` of N new tokens with a dynamic or static KV cache
(generate.py: markers "step N / prefill", "step N / decode K", "step N / generated").
The attention implementation is transformers' own choice unless one is asked for
(attention.py). A random scalar that only chooses a branch (LayerDrop) takes the likelier
branch, noted in `Prediction.notes` (random_branches.py); a step that fails names the
phase, module and op (location.py).
One rank of an FSDP2 or DDP job (parallel.py): the model is built on the device and
wrapped after gradient checkpointing, before the optimizer; under FSDP2 bf16/fp16 is its
MixedPrecisionPolicy (parameters all-gathered in that dtype, gradients reduced in fp32) instead
of autocast, as torchtitan trains. With tensor parallelism (tp, tensor_parallel.py) the
model is split over the mesh's "tp" dimension first, and the loss is computed under
loss_parallel(), forward and backward.
LoRA and QLoRA (adapters.py): peft's adapters on a base loaded in the step's dtype (QLoRA:
in 4 bits by bitsandbytes, bnb.py), the optimizer over the trainable parameters only.
"""

import json
import os

from .capture import capture
from .errors import PredictionError

OPTIMIZERS = ("adamw", "adamw-fused", "adamw-foreach", "sgd", "none")
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": None}


def load_config(config, overrides=None):
    """A transformers PretrainedConfig from a PretrainedConfig, a dict, a config.json path or a
    model_type name ("gpt2", "llama": the library's defaults), with `overrides` (a dict) applied."""
    from transformers import AutoConfig, PretrainedConfig

    if isinstance(config, PretrainedConfig):
        cfg = config
    elif isinstance(config, dict):
        data = dict(config)
        if "model_type" not in data:
            raise PredictionError("the config has no model_type")
        cfg = AutoConfig.for_model(data.pop("model_type"), **data)
    elif isinstance(config, str) and os.path.isfile(config):
        try:
            with open(config) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            raise PredictionError(f"{config}: not a config.json: {e}") from e
        if not isinstance(data, dict) or "model_type" not in data:
            raise PredictionError(f"{config}: no model_type in the config")
        cfg = AutoConfig.for_model(data.pop("model_type"), **data)
    elif isinstance(config, str):
        try:
            cfg = AutoConfig.for_model(config)
        except ValueError as e:
            raise PredictionError(f"{config!r} is neither a config.json nor a model type") from e
    else:
        raise PredictionError(f"unsupported config {type(config).__name__}")
    for key, value in (overrides or {}).items():
        setattr(cfg, key, value)
    return cfg


def _write_model_record(config, job):
    """Records the model (format fragscope.model/1: model_record.py) in the prediction's log."""
    from .. import _library, model_record

    text = model_record.model_json(config, **job)
    _library.load(_library.ALLOC).fragscope_record_model(text.encode())


_DTYPE_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def _record_job(job, model, attention):
    """The job's keys for the model record, once the model is built: the attention it runs and,
    for inference, the dtype its weights are held in (fp32 under autocast). An attention the
    record has no name for (flex_attention, a hub kernel) is left out: the analyzer assumes."""
    base = attention.split("|")[-1]  # "paged|sdpa" runs SDPA
    recorded = "flash" if base.startswith("flash") else base
    job = dict(job)
    if recorded in ("sdpa", "eager", "flash"):
        job["attention"] = recorded
    if job["mode"] == "inference":
        weights = next((p.dtype for p in model.parameters()), None)
        name = str(weights).replace("torch.", "") if weights is not None else None
        job["weight_dtype"] = _DTYPE_NAMES.get(name, name)
    return job


def predict_hf(config, log, *, seq, micro_batch, steps=1, mode="training", optimizer="adamw",
               dtype="bf16", attention="auto", recompute=False, gpu="h100-80gb", conf=None,
               lora=False, qlora=False, lora_rank=8, lora_alpha=None, lora_targets=None,
               lora_dropout=0.0,
               lr=1e-4, overrides=None, journal=None, world_size=None, rank=0, parallel=None,
               bucket_cap_mb=None, generate=None, cache=None, tp=1, ep=1,
               ep_routing="balanced", cp=1, cuda_graphs=False,
               compile=False, compile_mode="default"):
    """Predicts `steps` steps of the standard loop (see the module doc) into `log` (and
    `journal`: capture.capture). `micro_batch` is per rank; world_size, rank, parallel
    ("fsdp2", "ddp") and bucket_cap_mb (ddp): the rank of a data-parallel job
    (parallel.py); tp: tensor and sequence parallelism over tp ranks, alone or with
    fsdp2 over world_size / tp (tensor_parallel.py; world_size default: tp); ep: a
    mixture-of-experts model's experts split over ep of the fsdp2 ranks, the routing assumed
    "balanced" or "worst" (ep_routing; expert_parallel.py); cp: each step's sequence split
    over cp of the fsdp2 ranks, SDPA run as ring attention (context_parallel.py).
    attention: "auto" (transformers' choice: SDPA, else eager), "sdpa" or "eager"; the one used
    is `Prediction.attention`. `Prediction.notes`: what the prediction
    assumed (a random branch's likelier side); `Prediction.params`: the model's parameters (each
    shared one once). Inference with `generate` (new tokens) runs transformers' `generate` after
    prompts of micro_batch x seq tokens, with `cache` "dynamic" (the default) or "static"
    (generate.py); `Prediction.generated`: the cache it ended with. lora or qlora (with
    lora_rank, lora_alpha, lora_targets, lora_dropout): peft's LoRA, over a 4-bit base for qlora
    (adapters.py); `Prediction.adapter`: what was adapted. cuda_graphs (inference): the
    forward warmed up, captured once into a CUDA graph and replayed each step
    (cuda_graphs.GraphedForward); `Prediction.graph_pool`: the graph's pool id. compile: the
    model compiled as `model = torch.compile(model, mode=compile_mode)` once built (training or
    inference; compile.py); for a rank (fsdp2, tp) each block compiled (block_compile.py)."""
    import contextlib

    import torch
    from transformers import AutoModelForCausalLM

    from . import adapters, attention as attention_impl, parallel as parallelism, roles
    from .location import Location, failure
    from .random_branches import mode as random_branches
    from .tensor_parallel import loss_parallel

    if mode not in ("training", "inference"):
        raise PredictionError(f"mode must be training or inference, not {mode!r}")
    check_step(optimizer, dtype, seq, micro_batch, steps)
    cache = _check_generate(mode, generate, cache)
    if cuda_graphs and (mode != "inference" or generate is not None):
        raise PredictionError("cuda_graphs captures the inference forward (mode='inference', "
                              "no generate)")
    if compile:
        from .compile import check_job

        check_job(compile_mode, **{"cuda_graphs": cuda_graphs, "generate": generate is not None,
                                   "parallel": parallel, "ep": ep != 1, "cp": cp != 1,
                                   "lora": lora, "qlora": qlora, "recompute": recompute})
    adapter = adapters.adapter(lora, qlora, lora_rank, lora_alpha, lora_targets,
                               lora_dropout)
    try:
        rank_job = parallelism.job(parallel, world_size, rank, bucket_cap_mb,
                                   wrap_required=True, tp=tp, ep=ep, ep_routing=ep_routing,
                                   cp=cp)
        if cp > 1:
            from .context_parallel import check as check_cp

            check_cp(cp, seq)
    except ValueError as e:
        raise PredictionError(str(e)) from e
    if rank_job is not None and mode != "training":
        what = f"parallel={parallel!r}" if parallel else f"tp={tp}"
        raise PredictionError(f"{what} predicts training steps, not {mode}")
    if adapter is not None and rank_job is not None:
        raise PredictionError(f"{adapter.kind} in a parallel job is not modeled")
    attention_impl.requested(attention)  # a bad value fails before the config is read
    cfg = load_config(config, overrides)
    attention_impl.check_supported(cfg, attention)
    if rank_job is not None and rank_job.tp > 1:
        from .tensor_parallel import check

        try:
            check(cfg, rank_job.tp, seq)
        except ValueError as e:
            raise PredictionError(str(e)) from e
    autocast_dtype = getattr(torch, DTYPES[dtype]) if DTYPES[dtype] else None
    # FSDP2 computes in the dtype its MixedPrecisionPolicy all-gathers, without autocast.
    param_dtype = None
    if rank_job is not None and rank_job.parallel == "fsdp2":
        param_dtype, autocast_dtype = autocast_dtype, None
    training = mode == "training"
    # Inference names its shape batch x context and says how the forward ran (model_record.py).
    job = {"mode": mode, "seq": seq if training else None,
           "micro_batch": micro_batch if training else None,
           "batch": None if training else micro_batch, "context": None if training else seq,
           "dtype": dtype, "optimizer": optimizer if training else None,
           "recompute": "full" if recompute else "none",
           "activations": "torch-autocast" if autocast_dtype else None,
           "autocast": None if training or autocast_dtype is None else dtype,
           "use_cache": None if training else generate is not None,
           "cuda_graphs": True if cuda_graphs else None}
    if generate is not None:
        # The positions the cache holds at the end: the last new token is never fed back.
        job.update(context=seq + generate - 1, prompt=seq, new_tokens=generate, cache=cache)
    job = {k: v for k, v in job.items() if v is not None}
    location = Location()
    notes = []  # what a generation assumed (generate.py), the experts' routing
    if rank_job is not None and rank_job.ep > 1:
        from .expert_parallel import routing_note

        notes.append(routing_note(rank_job.ep, rank_job.ep_routing))
    built = {}  # the attention used and the recorded job, once the model is built
    with capture(log, gpu=gpu, conf=conf, journal=journal,
                 compile=compile) as (prediction, mark), contextlib.ExitStack() as ranks:
        phase = []

        def marked(text):
            phase.append(text)
            mark(text)

        ranks.enter_context(location.watching())
        branches = ranks.enter_context(random_branches(location))
        if adapter is not None:
            ranks.enter_context(adapter.running())
        try:
            mesh = None
            if rank_job is not None:
                mesh = ranks.enter_context(parallelism.fake_process_group(rank_job))
                ranks.enter_context(loss_parallel(rank_job.tp > 1))
                if compile:
                    from .block_compile import unwarned

                    ranks.enter_context(unwarned())
            marked("init / weights")
            torch.manual_seed(0)

            def build(**options):
                return AutoModelForCausalLM.from_config(
                    cfg, attn_implementation=attention_impl.requested(attention), **options)

            def make_model():
                with torch.device("cuda"):
                    # An adapter's base is loaded in the step's dtype (QLoRA: in 4 bits).
                    model = build() if adapter is None else adapter.load(
                        build, getattr(torch, DTYPES[dtype] or "float32"))
                built["attention"] = attention_impl.used(model)
                if rank_job is not None and rank_job.cp > 1:
                    from .context_parallel import check_attention

                    check_attention(built["attention"], rank_job.cp)
                built["params"] = sum(p.numel() for p in model.parameters())
                location.name_modules(model)
                if not training:
                    return model.eval()
                model.train()
                if recompute:
                    model.gradient_checkpointing_enable(
                        gradient_checkpointing_kwargs={"use_reentrant": False})
                return model

            if adapter is not None:
                make_model = adapters.attaching(make_model, adapter, location, job, dtype)
            with roles.current(roles.WEIGHTS):
                if rank_job is None:
                    model = make_model()
                else:
                    # compile: each block compiled before fully_shard (block_compile.py).
                    model = parallelism.build(make_model, rank_job, mesh,
                                              param_dtype=param_dtype,
                                              compile_mode=compile_mode if compile else None)
                built["job"] = _record_job(job, model, built["attention"])
                # A rank's layout: tp, dp, zero, sp (parallel.record_keys).
                built["job"].update(parallelism.record_keys(rank_job))
                if generate is None:  # else once the cache's dtype is known
                    _write_model_record(cfg, built["job"])
            roles.name_parameters(model)
            opt = _optimizer(model, optimizer, lr) if training else None
            if compile and rank_job is None:
                model = torch.compile(model, mode=compile_mode)
            roles.tag_states_when_made(opt)
            if training:
                roles.tag_gradients_when_made(model.parameters())
            graphed = None
            if cuda_graphs:
                from .cuda_graphs import GraphedForward

                def forward(ids):
                    with torch.autocast("cuda", dtype=autocast_dtype or torch.float32,
                                        enabled=autocast_dtype is not None), torch.no_grad():
                        return model(input_ids=ids, use_cache=False).logits

                graphed = GraphedForward(forward, (micro_batch, seq), cfg.vocab_size, marked)
                built["graph_pool"] = graphed.pool
            for step in range(steps):
                if graphed is not None:
                    graphed.step(step)
                    continue
                if generate is not None:
                    _generate(model, cfg, built, step, seq, micro_batch, generate, cache,
                              autocast_dtype, marked, notes)
                    continue
                ids = torch.randint(0, cfg.vocab_size, (micro_batch, seq), device="cuda")
                # Context parallelism: forward and backward on the rank's part of the sequence.
                sharded = contextlib.ExitStack()
                if rank_job is not None and rank_job.cp > 1:
                    from .context_parallel import sequence_sharded

                    sharded.enter_context(sequence_sharded(mesh["cp"], ids))
                marked(f"step {step} / forward")
                with torch.autocast("cuda", dtype=autocast_dtype or torch.float32,
                                    enabled=autocast_dtype is not None):
                    if training:
                        with roles.saving_activations(model.parameters()):
                            loss = model(input_ids=ids, labels=ids).loss
                    else:
                        with torch.no_grad():
                            loss = model(input_ids=ids, use_cache=False).logits
                if training:
                    marked(f"step {step} / backward")
                    loss.backward()
                    sharded.close()
                    roles.tag_gradients(model.parameters())
                    if opt is not None:
                        marked(f"step {step} / optimizer")
                        with roles.current(roles.OPTIMIZER_TEMPORARIES):
                            opt.step()
                        roles.tag_optimizer_states(opt)
                        opt.zero_grad(set_to_none=True)
                del loss, ids
            marked("end")
            del model, opt, graphed
        except PredictionError:
            raise
        except Exception as e:
            # The failing module and op, from the watch (location.py).
            raise failure(e, location, phase[-1] if phase else None) from e
        finally:
            prediction.notes = branches.notes + notes
    prediction.config = cfg
    prediction.job = built.get("job", job)
    prediction.attention = built.get("attention")
    prediction.params = built.get("params")
    prediction.rank_job = rank_job
    prediction.generated = built.get("generated")
    prediction.graph_pool = built.get("graph_pool")
    prediction.adapter = adapter.summary() if adapter is not None else None
    return prediction


def check_step(optimizer, dtype, seq, micro_batch, steps):
    """PredictionError naming the first bad one of a step's settings."""
    if optimizer not in OPTIMIZERS:
        raise PredictionError(f"optimizer must be one of {', '.join(OPTIMIZERS)}")
    if dtype not in DTYPES:
        raise PredictionError(f"dtype must be one of {', '.join(DTYPES)}")
    if seq < 1 or micro_batch < 1 or steps < 1:
        raise PredictionError("seq, micro_batch and steps must be positive")


def _check_generate(mode, generate, cache):
    """The cache implementation of a generation (None without one); PredictionError for a bad
    combination."""
    from .generate import CACHES

    if generate is None:
        if cache is not None:
            raise PredictionError("cache goes with generate (new tokens)")
        return None
    if mode != "inference":
        raise PredictionError(f"generate predicts inference, not {mode}")
    if isinstance(generate, bool) or not isinstance(generate, int) or generate < 1:
        raise PredictionError(f"generate must be a positive number of new tokens, not "
                              f"{generate!r}")
    cache = cache or "dynamic"
    if cache not in CACHES:
        raise PredictionError(f"cache must be one of {', '.join(CACHES)}, not {cache!r}")
    return cache


def _generate(model, cfg, built, step, seq, micro_batch, new_tokens, cache, autocast_dtype,
              marked, notes):
    """One step of a generation (generate.py); after the first, the model record with
    the dtype the cache holds (kv_dtype, when its keys and values share one: a Llama under bf16
    autocast with fp32 weights caches fp32, its rotary embedding promoting the keys)."""
    import torch

    from . import generate as generation

    with torch.autocast("cuda", dtype=autocast_dtype or torch.float32,
                        enabled=autocast_dtype is not None), torch.no_grad():
        generated = generation.generate(
            model, step=step, prompt=seq, batch=micro_batch, new_tokens=new_tokens, cache=cache,
            vocab_size=cfg.vocab_size, marked=marked, notes=notes)
    if "generated" not in built and "job" in built:
        if generated.kv_dtype() is not None:
            built["job"]["kv_dtype"] = generated.kv_dtype()
        _write_model_record(cfg, built["job"])
    built["generated"] = generated.as_dict()


def _optimizer(model, optimizer, lr):
    """The training loop's optimizer (None for "none"), over the trainable parameters (all but
    a frozen base's)."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    if optimizer.startswith("adamw"):
        flags = {"adamw-fused": {"fused": True}, "adamw-foreach": {"foreach": True}}
        return torch.optim.AdamW(params, lr=lr, **flags.get(optimizer, {}))
    if optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr)
    return None
