"""fragscope.predict_pp: the training loop of one rank of a pipeline-parallel job
(pipeline.py) of a Hugging Face Llama-family config, predicted on the simulated GPU, with
the model recorded in the log (pp and the rank's stages in its job keys).

Each step: random token ids of (microbatches x micro_batch) x seq on the first stage's rank
(the schedule splits them), the same as labels on the last stage's; schedule.step() runs the
rank's stages' forwards and backwards under bf16 (or fp16) autocast in the schedule's order
(markers "step N / forward M" and "step N / backward M"), then the optimizer's step over the
rank's stages' parameters and zero_grad(set_to_none=True) ("step N / optimizer"). With FSDP2
(world_size = pp x dp, parallel="fsdp2") each stage's decoder layers and the stage are sharded
over the rank's "dp" group of a ("pp", "dp") mesh, pp outermost as torchtitan lays it out, with
its MixedPrecisionPolicy instead of autocast and not resharded after forward (torchtitan's choice
under pipeline parallelism); PipelineStage itself defers the gradients' reduce-scatter and the
reshard to after the last microbatch's backward (perform_reduce_grad). With tensor parallelism
(tp) the mesh is ("pp", "dp", "tp"), tp innermost: each stage is split first, then its layers
split by torchtitan's plan (tensor_parallel.py) over "tp", then sharded by FSDP2 over "dp"; the
stages pass their seq / tp positions of the hidden states, and the last computes the loss under
loss_parallel().
"""

from .capture import capture
from .errors import PredictionError
from .pipeline import SCHEDULES


def predict_pp(config, log, *, seq, micro_batch, pp, schedule="1f1b", microbatches=None,
               rank=0, world_size=None, steps=1, optimizer="adamw", dtype="bf16",
               attention="auto", gpu="h100-80gb", conf=None, overrides=None, lr=1e-4,
               journal=None, parallel=None, tp=1, ep=1, ep_routing="balanced"):
    """Predicts `steps` training steps of rank `rank` of a job split into `pp` pipeline stages
    (pipeline.plan: the schedule "gpipe", "1f1b" or "interleaved-1f1b", `microbatches`
    microbatches of `micro_batch` sequences per step; default: one per stage). world_size
    (default pp): pp x dp ranks, with parallel="fsdp2" sharding each stage over its dp ranks (a
    ("pp", "dp") mesh, pp outermost as torchtitan lays it out). tp: each stage's layers split
    over tp ranks as well (a ("pp", "dp", "tp") mesh; world_size default pp x tp). ep (with
    parallel="fsdp2", without tp): each stage's experts split over ep of its dp ranks, as
    torchtitan runs DeepSeek-V3 (a ("pp", "dp_mod_ep", "ep") mesh; expert_parallel.py, routing
    `ep_routing`). `Prediction.pipeline`: the rank's plan as a dict."""
    import torch

    from . import attention as attention_impl, parallel as parallelism, pipeline as pipelining
    from . import roles
    from .hf_loop import (DTYPES, _optimizer, _record_job, _write_model_record,
                          check_step, load_config)
    from .location import Location, failure
    from .tensor_parallel import loss_parallel

    check_step(optimizer, dtype, seq, micro_batch, steps)
    attention_impl.requested(attention)
    cfg = load_config(config, overrides)
    attention_impl.check_supported(cfg, attention)
    try:
        rank_plan = pipelining.plan(cfg, pp, schedule, microbatches, rank, world_size,
                                    parallel, tp)
        if tp > 1:
            from .tensor_parallel import check

            check(cfg, tp, seq)
        if ep != 1:
            # A stage's experts split over ep of its data-parallel ranks (torchtitan's layout).
            if isinstance(ep, int) and not isinstance(ep, bool) and ep > 1 and rank_plan.dp % ep:
                raise ValueError(f"ep {ep} does not divide a stage's {rank_plan.dp} "
                                 "data-parallel ranks")
            parallelism.job(parallel, rank_plan.dp * tp, 0, tp=tp, ep=ep, ep_routing=ep_routing)
    except ValueError as e:
        raise PredictionError(str(e)) from e
    num_stages = pp * pipelining.stages_per_rank(schedule)
    first = 0 in rank_plan.stages
    last = num_stages - 1 in rank_plan.stages
    autocast_dtype = getattr(torch, DTYPES[dtype]) if DTYPES[dtype] else None
    # FSDP2 computes in the dtype its MixedPrecisionPolicy all-gathers, without autocast.
    param_dtype = None
    if parallel == "fsdp2":
        param_dtype, autocast_dtype = autocast_dtype, None
    job = {"mode": "training", "seq": seq, "micro_batch": micro_batch, "dtype": dtype,
           "optimizer": optimizer, "recompute": "none",
           "activations": "torch-autocast" if autocast_dtype else None, "pp": pp,
           "pp_schedule": schedule, "pp_microbatches": rank_plan.microbatches,
           "pp_stages": ",".join(map(str, rank_plan.stages)),
           "dp": rank_plan.dp if parallel else None, "zero": 3 if parallel else None,
           "tp": tp if tp > 1 else None, "sp": True if tp > 1 else None,
           "ep": ep if ep > 1 else None}
    job = {k: v for k, v in job.items() if v is not None}
    rank_job = parallelism.Job(None, pp * rank_plan.dp * tp, rank, None, tp, pp, ep, ep_routing)
    location = Location()
    built = {}
    with capture(log, gpu=gpu, conf=conf, journal=journal) as (prediction, mark):
        phase = []

        def marked(text):
            phase.append(text)
            mark(text)

        try:
            buffers = pipelining.ReceiveBuffers()
            with location.watching(), \
                    parallelism.fake_process_group(rank_job) as mesh, buffers.made():
                marked("init / weights")
                torch.manual_seed(0)
                modules = _build_stages(cfg, attention, rank_plan, num_stages, built,
                                        mesh["dp"] if parallel else None, param_dtype,
                                        mesh["tp"] if tp > 1 else None,
                                        experts=mesh if ep > 1 else None, routing=ep_routing)
                for m in modules:
                    location.name_modules(m)
                built["params"] = sum(p.numel() for m in modules for p in m.parameters())
                record = _record_job(job, modules[0], built["attention"])
                _write_model_record(cfg, record)
                built["job"] = record
                params = [p for m in modules for p in m.parameters()]
                roles.name_parameters(torch.nn.ModuleList(modules))
                # The hidden states between stages: the residual stream's dtype (fp32 weights
                # under autocast; FSDP2's param_dtype).
                weights_dtype = param_dtype or params[0].dtype

                def loss_fn(logits, labels):
                    return modules[-1].causal.loss_function(logits, labels, cfg.vocab_size)

                stages = pipelining.pipeline_stages(
                    modules, rank_plan, micro_batch, seq, cfg.hidden_size, cfg.vocab_size,
                    weights_dtype, autocast_dtype or weights_dtype, group=mesh["pp"].get_group())
                sched = pipelining.make_schedule(stages, rank_plan, loss_fn)
                opt = _optimizer(torch.nn.ModuleList(modules), optimizer, lr)
                roles.tag_states_when_made(opt)
                roles.tag_gradients_when_made(params)
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
                            loss_parallel(tp > 1), buffers.saving_activations(params), \
                            pipelining.marking_chunks(stages, step, marked):
                        sched.step(*args, **kwargs)
                    roles.tag_gradients(params)
                    if opt is not None:
                        marked(f"step {step} / optimizer")
                        with roles.current(roles.OPTIMIZER_TEMPORARIES):
                            opt.step()
                        roles.tag_optimizer_states(opt)
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
    if ep > 1:
        from .expert_parallel import routing_note

        prediction.notes = [routing_note(ep, ep_routing)]
    else:
        prediction.notes = []
    prediction.pipeline = {"pp": pp, "dp": rank_plan.dp, "tp": tp, "ep": ep, "schedule": schedule,
                           "microbatches": rank_plan.microbatches,
                           "stages": list(rank_plan.stages),
                           "layers": [list(r) for r in rank_plan.layers]}
    return prediction


def _build_stages(cfg, attention, rank_plan, num_stages, built, dp_mesh=None, param_dtype=None,
                  tp_mesh=None, experts=None, routing="balanced"):
    """The rank's stage modules, built as torchtitan builds them: the whole model made and split
    with nothing recorded (torchtitan: on the meta device), with tp_mesh each stage's modules
    split by the tensor-parallel plan (tensor_parallel.parallelize), with dp_mesh each stage
    sharded by
    FSDP2 (each decoder layer, then the stage; not resharded after forward, torchtitan's choice
    under pipeline parallelism: the microbatches' forwards share one all-gather), then each
    stage's parameters (local shards) and buffers allocated in Module.to_empty's order
    (parallel.materialize)."""
    import torch
    from transformers import AutoModelForCausalLM

    from . import attention as attention_impl, pipeline as pipelining, roles
    from .kernels import untracked
    from .parallel import materialize

    with untracked():
        with torch.device("cuda"):
            whole = AutoModelForCausalLM.from_config(
                cfg, attn_implementation=attention_impl.requested(attention))
        built["attention"] = attention_impl.used(whole)
        modules = [pipelining.split(whole, s, num_stages, layers).train()
                   for s, layers in zip(rank_plan.stages, rank_plan.layers)]
        del whole
        if tp_mesh is not None:
            from .tensor_parallel import parallelize

            for module in modules:
                parallelize(module.causal, tp_mesh, stage=True)
                module.tp_mesh = tp_mesh
        if experts is not None:
            from . import expert_parallel

            for module in modules:  # a stage of dense layers only has none
                if expert_parallel.experts_modules(module):
                    expert_parallel.parallelize(module, experts["ep"], routing)
        if dp_mesh is not None:
            from torch.distributed.fsdp import fully_shard

            from .parallel import mixed_precision

            policy = mixed_precision(param_dtype)
            options = {"mesh": dp_mesh, "reshard_after_forward": False}
            if policy is not None:
                options["mp_policy"] = policy
            for module in modules:
                for layer in module.causal.model.layers:
                    for experts_module in ([] if experts is None
                                           else expert_parallel.experts_modules(layer)):
                        # A layer's experts over "dp_mod_ep" first, as parallel.wrap shards them.
                        fully_shard(experts_module, **dict(options, mesh=experts["dp_mod_ep"]),
                                    shard_placement_fn=expert_parallel.fsdp_placement(
                                        experts_module, experts["dp_mod_ep"].size(),
                                        experts["ep"].size()))
                    fully_shard(layer, **options)
                fully_shard(module, **options)
    with roles.current(roles.WEIGHTS):
        materialize(modules)
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
    if getattr(args, "cp", 1) > 1:
        raise ValueError(f"--pp with --cp {args.cp} is not modeled: pipeline parallelism is "
                         "predicted alone, with --tp, with --parallel fsdp2, or with --ep under it")
    ep = getattr(args, "ep", 1)
    if ep > 1 and (args.parallel != "fsdp2" or args.tp > 1):
        raise ValueError(f"--pp with --ep {ep} needs --parallel fsdp2 without --tp (torchtitan "
                         "splits each stage's experts over its data-parallel ranks)")
    if args.parallel == "ddp":
        raise ValueError("--pp with --parallel ddp is not modeled (torchtitan shards each stage "
                         "with FSDP2): use --parallel fsdp2")
    if args.mode != "training":
        raise ValueError(f"--pp predicts training steps, not --mode {args.mode}")
    if args.recompute:
        raise ValueError("--pp with --recompute is not modeled")
    if getattr(args, "lora", False) or getattr(args, "qlora", False):
        raise ValueError("--pp with --lora or --qlora is not modeled")
    if args.bucket_cap_mb is not None:
        raise ValueError("--bucket-cap-mb goes with --parallel ddp")
    if args.tp < 1:
        raise ValueError(f"--tp must be a positive integer, not {args.tp}")
    within = args.pp * args.tp
    named = f"--pp {args.pp}" + (f" x --tp {args.tp}" if args.tp > 1 else "")
    world = within if args.world_size is None else args.world_size
    if world < within or world % within:
        raise ValueError(f"--world-size {world} is not a multiple of {named} (the world "
                         "is pipeline x data-parallel x tensor-parallel ranks)")
    if world > within and args.parallel is None:
        raise ValueError(f"--world-size {world} with {named} leaves {world // within} "
                         "data-parallel ranks: they need --parallel fsdp2")
    if not 0 <= args.rank < world:
        raise ValueError(f"--rank must be in [0, {world}) for --world-size {world}, not "
                         f"{args.rank}")
    if ep > 1 and (world // within) % ep:
        raise ValueError(f"--ep {ep} does not divide a stage's {world // within} data-parallel "
                         "ranks")
    args.world_size = world
    return {"pp": args.pp, "schedule": args.pp_schedule, "microbatches": args.pp_microbatches,
            "rank": args.rank, "world_size": world, "parallel": args.parallel, "tp": args.tp,
            "ep": ep, "ep_routing": getattr(args, "ep_routing", "balanced")}


def describe(pipeline):
    """One line of a Prediction.pipeline: "pp 4, 1f1b, 4 microbatches, stage 0 (layers 0-1)",
    with " x fsdp2 dp 2" under FSDP2, " x tp 2" and " (ep 2)" (the experts over ep of the dp
    ranks)."""
    stages = ", ".join(f"stage {s} (layers {a}-{b - 1})"
                       for s, (a, b) in zip(pipeline["stages"], pipeline["layers"]))
    dp = f" x fsdp2 dp {pipeline['dp']}" if pipeline["dp"] > 1 else ""
    if pipeline.get("ep", 1) > 1:
        dp += f" (ep {pipeline['ep']})"
    if pipeline.get("tp", 1) > 1:
        dp += f" x tp {pipeline['tp']}"
    return (f"pp {pipeline['pp']}{dp}, {pipeline['schedule']}, {pipeline['microbatches']} "
            f"microbatches, {stages}")
