"""fragscope.predict_pp: the training loop of one rank of a pipeline-parallel job
(predict_pipeline.py) of a Hugging Face Llama-family config, predicted on the simulated GPU, with
the model recorded in the log (pp and the rank's stages in its job keys).

Each step: random token ids of (microbatches x micro_batch) x seq on the first stage's rank
(the schedule splits them), the same as labels on the last stage's; schedule.step() runs the
rank's stages' forwards and backwards under bf16 (or fp16) autocast in the schedule's order
(markers "step N / forward M" and "step N / backward M"), then the optimizer's step over the
rank's stages' parameters and zero_grad(set_to_none=True) ("step N / optimizer").
"""

from .predict_capture import PredictionError, capture
from .predict_pipeline import SCHEDULES


def predict_pp(config, log, *, seq, micro_batch, pp, schedule="1f1b", microbatches=None,
               rank=0, world_size=None, steps=1, optimizer="adamw", dtype="bf16",
               attention="auto", gpu="h100-80gb", conf=None, overrides=None, lr=1e-4,
               journal=None):
    """Predicts `steps` training steps of rank `rank` of a job split into `pp` pipeline stages
    (predict_pipeline.plan: the schedule "gpipe", "1f1b" or "interleaved-1f1b", `microbatches`
    microbatches of `micro_batch` sequences per step; default: one per stage). world_size, when
    given, must be pp. `Prediction.pipeline`: the rank's plan as a dict."""
    import torch

    from . import predict_attention, predict_parallel, predict_pipeline, predict_roles
    from .predict_hf_loop import (DTYPES, OPTIMIZERS, _optimizer, _record_job,
                                  _write_model_record, load_config)
    from .predict_location import Location, failure

    if optimizer not in OPTIMIZERS:
        raise PredictionError(f"optimizer must be one of {', '.join(OPTIMIZERS)}")
    if dtype not in DTYPES:
        raise PredictionError(f"dtype must be one of {', '.join(DTYPES)}")
    if seq < 1 or micro_batch < 1 or steps < 1:
        raise PredictionError("seq, micro_batch and steps must be positive")
    predict_attention.requested(attention)
    cfg = load_config(config, overrides)
    predict_attention.check_supported(cfg, attention)
    try:
        rank_plan = predict_pipeline.plan(cfg, pp, schedule, microbatches, rank, world_size)
    except ValueError as e:
        raise PredictionError(str(e)) from e
    num_stages = pp * predict_pipeline.stages_per_rank(schedule)
    first = 0 in rank_plan.stages
    last = num_stages - 1 in rank_plan.stages
    autocast_dtype = getattr(torch, DTYPES[dtype]) if DTYPES[dtype] else None
    job = {"mode": "training", "seq": seq, "micro_batch": micro_batch, "dtype": dtype,
           "optimizer": optimizer, "recompute": "none",
           "activations": "torch-autocast" if autocast_dtype else None, "pp": pp,
           "pp_schedule": schedule, "pp_microbatches": rank_plan.microbatches,
           "pp_stages": ",".join(map(str, rank_plan.stages))}
    job = {k: v for k, v in job.items() if v is not None}
    rank_job = predict_parallel.Job(None, pp, rank, None)
    location = Location()
    built = {}
    with capture(log, gpu=gpu, conf=conf, journal=journal) as (prediction, mark):
        phase = []

        def marked(text):
            phase.append(text)
            mark(text)

        try:
            buffers = predict_pipeline.ReceiveBuffers()
            with location.watching(), predict_parallel.fake_process_group(rank_job), \
                    buffers.made():
                marked("init / weights")
                torch.manual_seed(0)
                modules = _build_stages(cfg, attention, rank_plan, num_stages, built)
                for m in modules:
                    location.name_modules(m)
                built["params"] = sum(p.numel() for m in modules for p in m.parameters())
                record = _record_job(job, modules[0], built["attention"])
                _write_model_record(cfg, record)
                built["job"] = record
                params = [p for m in modules for p in m.parameters()]
                predict_roles.name_parameters(torch.nn.ModuleList(modules))
                weights_dtype = params[0].dtype

                def loss_fn(logits, labels):
                    return modules[-1].causal.loss_function(logits, labels, cfg.vocab_size)

                stages = predict_pipeline.pipeline_stages(
                    modules, rank_plan, micro_batch, seq, cfg.hidden_size, cfg.vocab_size,
                    weights_dtype, autocast_dtype or weights_dtype)
                sched = predict_pipeline.make_schedule(stages, rank_plan, loss_fn)
                opt = _optimizer(torch.nn.ModuleList(modules), optimizer, lr)
                predict_roles.tag_states_when_made(opt)
                predict_roles.tag_gradients_when_made(params)
                batch = rank_plan.microbatches * micro_batch
                for step in range(steps):
                    # The batch's token ids; the schedule splits them and, on the first step,
                    # makes the receive buffers before the first microbatch's forward.
                    marked(f"step {step} / schedule")
                    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device="cuda")
                    args = (ids,) if first else ()
                    kwargs = {"target": ids, "losses": []} if last else {}
                    with torch.autocast("cuda", dtype=autocast_dtype or torch.float32,
                                        enabled=autocast_dtype is not None), \
                            buffers.saving_activations(params), \
                            predict_pipeline.marking_chunks(stages, step, marked):
                        sched.step(*args, **kwargs)
                    predict_roles.tag_gradients(params)
                    if opt is not None:
                        marked(f"step {step} / optimizer")
                        with predict_roles.current(predict_roles.OPTIMIZER_TEMPORARIES):
                            opt.step()
                        predict_roles.tag_optimizer_states(opt)
                        opt.zero_grad(set_to_none=True)
                    del ids, args, kwargs
                marked("end")
                del modules, stages, sched, opt, params
        except PredictionError:
            raise
        except Exception as e:
            raise failure(e, location, phase[-1] if phase else None) from e
    prediction.config = cfg
    prediction.job = built.get("job", job)
    prediction.attention = built.get("attention")
    prediction.params = built.get("params")
    prediction.notes = []
    prediction.pipeline = {"pp": pp, "schedule": schedule,
                           "microbatches": rank_plan.microbatches,
                           "stages": list(rank_plan.stages),
                           "layers": [list(r) for r in rank_plan.layers]}
    return prediction


def _build_stages(cfg, attention, rank_plan, num_stages, built):
    """The rank's stage modules, built as torchtitan builds them: the whole model made and split
    with nothing recorded (torchtitan: on the meta device), then each stage's parameters and
    buffers allocated in Module.to_empty's order (predict_parallel._to_empty_order)."""
    import torch
    from transformers import AutoModelForCausalLM

    from . import predict_attention, predict_pipeline, predict_roles
    from .predict_capture import reallocate, track
    from .predict_kernels import metadata_only
    from .predict_parallel import _to_empty_order

    metadata_only.depth = getattr(metadata_only, "depth", 0) + 1
    try:
        with torch.device("cuda"):
            whole = AutoModelForCausalLM.from_config(
                cfg, attn_implementation=predict_attention.requested(attention))
        built["attention"] = predict_attention.used(whole)
        modules = [predict_pipeline.split(whole, s, num_stages, layers).train()
                   for s, layers in zip(rank_plan.stages, rank_plan.layers)]
        del whole
    finally:
        metadata_only.depth -= 1
    seen = set()
    with predict_roles.current(predict_roles.WEIGHTS):
        for module in modules:
            for tensor in _to_empty_order(module):
                storage = tensor.untyped_storage()
                if storage._cdata in seen:
                    reallocate(storage)
                else:
                    seen.add(storage._cdata)
                    track(storage)
    return modules


def add_flags(parser):
    """The CLI's pipeline flags (python -m fragscope predict)."""
    parser.add_argument("--pp", type=int,
                        help="pipeline parallelism over N ranks (a Llama-family --config split "
                        "by decoder layers; --rank picks the rank, whose stages it predicts)")
    parser.add_argument("--pp-schedule", choices=SCHEDULES, default="1f1b",
                        help="the pipeline schedule (default 1f1b; interleaved-1f1b: two "
                        "stages per rank)")
    parser.add_argument("--pp-microbatches", type=int, metavar="N",
                        help="microbatches of --micro-batch sequences per step (default: the "
                        "number of stages)")


def options(args):
    """predict_pp's keyword arguments for the pipeline flags ({} without --pp); ValueError names
    a flag that does not go with --pp."""
    if args.pp is None:
        if args.pp_microbatches is not None or args.pp_schedule != "1f1b":
            raise ValueError("--pp-schedule and --pp-microbatches go with --pp")
        return {}
    if args.pp < 2:
        raise ValueError(f"--pp must be at least 2, not {args.pp}")
    if not args.config:
        raise ValueError("--pp goes with --config (the split is for Llama-family models)")
    if args.parallel or args.tp > 1:
        other = f"--parallel {args.parallel}" if args.parallel else f"--tp {args.tp}"
        raise ValueError(f"--pp with {other} is not modeled: pipeline parallelism is predicted "
                         "alone (the world is the --pp ranks)")
    if args.mode != "training":
        raise ValueError(f"--pp predicts training steps, not --mode {args.mode}")
    if args.recompute:
        raise ValueError("--pp with --recompute is not modeled")
    if getattr(args, "lora", False) or getattr(args, "qlora", False):
        raise ValueError("--pp with --lora or --qlora is not modeled")
    if args.bucket_cap_mb is not None:
        raise ValueError("--bucket-cap-mb goes with --parallel ddp")
    if args.world_size is not None and args.world_size != args.pp:
        raise ValueError(f"--world-size {args.world_size} with --pp {args.pp}: pipeline "
                         "parallelism is predicted alone, over a world of --pp ranks")
    if not 0 <= args.rank < args.pp:
        raise ValueError(f"--rank must be in [0, {args.pp}) for --pp {args.pp}, not {args.rank}")
    args.world_size = args.pp
    return {"pp": args.pp, "schedule": args.pp_schedule, "microbatches": args.pp_microbatches,
            "rank": args.rank}


def describe(pipeline):
    """One line of a Prediction.pipeline: "pp 4, 1f1b, 4 microbatches, stage 0 (layers 0-1)"."""
    stages = ", ".join(f"stage {s} (layers {a}-{b - 1})"
                       for s, (a, b) in zip(pipeline["stages"], pipeline["layers"]))
    return (f"pp {pipeline['pp']}, {pipeline['schedule']}, {pipeline['microbatches']} "
            f"microbatches, {stages}")
