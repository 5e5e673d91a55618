"""fragscope.predict_hf: the standard training or inference loop of a Hugging Face model config,
predicted on the simulated GPU (fragscope.predict), with the model recorded in the log. (The
module's name differs from the function's: importing a submodule named predict_hf would replace
the package's function of that name.)

The loop is the one scripts/gpu/model_oom_check.py runs: the model built on the device, random
token ids of micro_batch x seq, bf16 (or fp16) autocast, loss = model(input_ids, labels).loss,
backward, the optimizer's step, zero_grad(set_to_none=True); markers "step N / forward",
"step N / backward", "step N / optimizer". Inference: the forward under torch.no_grad().
One rank of an FSDP2 or DDP job (predict_parallel.py): the model is built on the device and
wrapped after gradient checkpointing, before the optimizer; under FSDP2 bf16/fp16 is its
MixedPrecisionPolicy (parameters all-gathered in that dtype, gradients reduced in fp32) instead
of autocast, as torchtitan trains.
"""

import json
import os

from .predict_capture import PredictionError, capture

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
    from . import _ALLOC, _load, model_record

    _load(_ALLOC).fragscope_record_model(model_record.model_json(config, **job).encode())


def predict_hf(config, log, *, seq, micro_batch, steps=1, mode="training", optimizer="adamw",
               dtype="bf16", attention="sdpa", recompute=False, gpu="h100-80gb", conf=None,
               lr=1e-4, overrides=None, journal=None, world_size=1, rank=0, parallel=None,
               bucket_cap_mb=None):
    """Predicts `steps` steps of the standard loop (see the module doc) into `log` (and
    `journal`: predict_capture.capture). `micro_batch` is per rank; world_size, rank, parallel
    ("fsdp2", "ddp") and bucket_cap_mb (ddp): the rank of a data-parallel job
    (predict_parallel.py)."""
    import contextlib

    import torch
    from transformers import AutoModelForCausalLM

    from . import predict_parallel

    if mode not in ("training", "inference"):
        raise PredictionError(f"mode must be training or inference, not {mode!r}")
    if optimizer not in OPTIMIZERS:
        raise PredictionError(f"optimizer must be one of {', '.join(OPTIMIZERS)}")
    if dtype not in DTYPES:
        raise PredictionError(f"dtype must be one of {', '.join(DTYPES)}")
    if seq < 1 or micro_batch < 1 or steps < 1:
        raise PredictionError("seq, micro_batch and steps must be positive")
    try:
        rank_job = predict_parallel.job(parallel, world_size, rank, bucket_cap_mb,
                                        wrap_required=True)
    except ValueError as e:
        raise PredictionError(str(e)) from e
    if rank_job is not None and mode != "training":
        raise PredictionError(f"parallel={parallel!r} predicts training steps, not {mode}")
    cfg = load_config(config, overrides)
    autocast_dtype = getattr(torch, DTYPES[dtype]) if DTYPES[dtype] else None
    # FSDP2 computes in the dtype its MixedPrecisionPolicy all-gathers, without autocast.
    param_dtype = None
    if rank_job is not None and rank_job.parallel == "fsdp2":
        param_dtype, autocast_dtype = autocast_dtype, None
    job = {"mode": mode, "seq": seq, "micro_batch": micro_batch, "dtype": dtype,
           "optimizer": optimizer if mode == "training" else None, "attention": attention,
           "recompute": "full" if recompute else "none",
           "activations": "torch-autocast" if autocast_dtype else None}
    with capture(log, gpu=gpu, conf=conf, journal=journal) as (prediction, mark), \
            contextlib.ExitStack() as ranks:
        mesh = None
        if rank_job is not None:
            mesh = ranks.enter_context(predict_parallel.fake_process_group(rank_job))
        mark("init / weights")
        torch.manual_seed(0)

        def make_model():
            with torch.device("cuda"):
                model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attention)
            if mode != "training":
                return model.eval()
            model.train()
            if recompute:
                model.gradient_checkpointing_enable(
                    gradient_checkpointing_kwargs={"use_reentrant": False})
            return model

        if rank_job is None:
            model = make_model()
            # The record's job has no data-parallel layout: a rank's shard is not described.
            _write_model_record(cfg, job)
        else:
            model = predict_parallel.build(make_model, rank_job, mesh, param_dtype=param_dtype)
        opt = None
        if mode == "training":
            if optimizer.startswith("adamw"):
                flags = {"adamw-fused": {"fused": True}, "adamw-foreach": {"foreach": True}}
                opt = torch.optim.AdamW(model.parameters(), lr=lr, **flags.get(optimizer, {}))
            elif optimizer == "sgd":
                opt = torch.optim.SGD(model.parameters(), lr=lr)
        vocab = cfg.vocab_size
        for step in range(steps):
            ids = torch.randint(0, vocab, (micro_batch, seq), device="cuda")
            mark(f"step {step} / forward")
            with torch.autocast("cuda", dtype=autocast_dtype or torch.float32,
                                enabled=autocast_dtype is not None):
                if mode == "training":
                    loss = model(input_ids=ids, labels=ids).loss
                else:
                    with torch.no_grad():
                        loss = model(input_ids=ids, use_cache=False).logits
            if mode == "training":
                mark(f"step {step} / backward")
                loss.backward()
                if opt is not None:
                    mark(f"step {step} / optimizer")
                    opt.step()
                    opt.zero_grad(set_to_none=True)
            del loss, ids
        mark("end")
        del model, opt
    prediction.config = cfg
    prediction.job = job
    prediction.rank_job = rank_job
    return prediction
