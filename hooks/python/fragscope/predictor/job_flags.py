"""The command-line flags the predictor's commands share: `--set` and the rank of a data- or
tensor-parallel job (predict, carry, fit); the predicted training step's kernels, optimizer, GPU and
cap, and the fragscope flags that replay a log under that cap (carry, fit)."""

import json


def parse_set(values):
    """The --set KEY=VALUE overrides as a dict (a value is JSON, else the string)."""
    overrides = {}
    for item in values or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        try:
            overrides[key] = json.loads(raw)
        except ValueError:
            overrides[key] = raw
    return overrides


def add_rank_flags(p):
    """One rank of a data- or tensor-parallel job (parallel.py)."""
    p.add_argument("--parallel", choices=["fsdp2", "ddp"],
                   help="wrap the model in FSDP2 (fully_shard per block and root) or DDP; "
                   "with --compile under fsdp2 each transformer block is compiled before "
                   "fully_shard (torchtitan's apply_compile) instead of the whole model "
                   "(--compile on one GPU); ddp with --compile is refused")
    p.add_argument("--tp", type=int, default=1,
                   help="tensor and sequence parallelism over N ranks (a Llama-family "
                   "--config), alone or with --parallel fsdp2 over --world-size / N; with "
                   "--compile each transformer block is compiled after the split")
    p.add_argument("--ep", type=int, default=1,
                   help="expert parallelism: a mixture-of-experts --config's experts split "
                   "over N of the --parallel fsdp2 ranks (torchtitan's ExpertParallel)")
    p.add_argument("--ep-routing", choices=["balanced", "worst"], default="balanced",
                   help="the routing --ep assumes: balanced (each rank receives as many rows "
                   "as it sends) or worst (the most a rank's experts can receive)")
    p.add_argument("--cp", type=int, default=1,
                   help="context parallelism: each step's sequence split over N of the "
                   "--parallel fsdp2 ranks, SDPA as torch's ring attention")
    p.add_argument("--world-size", type=int,
                   help="the job's number of GPUs (a fake process group; default --tp, or 1)")
    p.add_argument("--rank", type=int, default=0, help="the rank to predict")
    p.add_argument("--bucket-cap-mb", type=float,
                   help="DDP's bucket cap (default: DDP's, 25 MiB after a first 1 MiB bucket)")


def rank_options(args, wrap_required=True):
    """predict_hf's (and predict's) keyword arguments for the rank flags; ValueError names a bad
    flag and its value. `wrap_required`: a world size above 1 needs --parallel (the standard
    loop)."""
    from .parallel import job

    ranks = job(args.parallel, args.world_size, args.rank, args.bucket_cap_mb, wrap_required,
                flags=True, tp=args.tp, ep=args.ep, ep_routing=args.ep_routing, cp=args.cp)
    args.world_size = ranks.world_size if ranks else 1
    if (args.parallel or args.tp > 1) and getattr(args, "mode", "training") != "training":
        flag = "--parallel" if args.parallel else "--tp"
        raise ValueError(f"{flag} predicts training steps (--mode training)")
    if args.tp > 1 and not getattr(args, "config", None):
        raise ValueError("--tp goes with --config (the plan is for Llama-family models)")
    options = {"parallel": args.parallel, "world_size": args.world_size, "rank": args.rank,
               "bucket_cap_mb": args.bucket_cap_mb}
    if args.tp > 1:
        options["tp"] = args.tp
    if args.ep > 1:
        if not getattr(args, "config", None):
            raise ValueError("--ep goes with --config (transformers' experts modules)")
        options.update(ep=args.ep, ep_routing=args.ep_routing)
    elif args.ep_routing != "balanced":
        raise ValueError("--ep-routing goes with --ep")
    if args.cp > 1:
        if not getattr(args, "config", None):
            raise ValueError("--cp goes with --config (the standard loop shards its ids)")
        options["cp"] = args.cp
    return options


def add_step_flags(p):
    """The step's own settings and the fragscope program (after each command's shape flags)."""
    p.add_argument("--optimizer", default="adamw",
                   choices=["adamw", "adamw-fused", "adamw-foreach", "sgd", "none"])
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    p.add_argument("--attention", choices=["auto", "sdpa", "eager"], default="auto",
                   help="auto: as transformers chooses (SDPA, else eager)")
    p.add_argument("--recompute", action="store_true", help="gradient checkpointing")
    p.add_argument("--gpu", default="h100-80gb",
                   help="the job's GPU (its kernels' choices, and its memory unless --capacity)")
    p.add_argument("--capacity", help="device capacity (default: the GPU's)")
    p.add_argument("--memory-fraction", help="the job's per-process memory fraction")
    p.add_argument("--allowed", help="... or its cap in bytes")
    p.add_argument("--conf", default="", help="the job's allocator settings")
    add_rank_flags(p)


def add_output_flags(p):
    p.add_argument("--fragscope", help="the fragscope program (default: $FRAGSCOPE_BIN, PATH)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def parse(parser, argv, command, positive):
    """Parses argv for `python -m fragscope COMMAND`: (args, config overrides, the GPU, the replay
    flags of its cap), or None after a usage error has been printed (exit 2). `positive`: the
    integer flags' names (argparse dests) that must be at least 1."""
    import sys

    from .device import find_gpu

    args = parser.parse_args(argv)
    try:
        overrides = parse_set(args.set)
        gpu = find_gpu(args.gpu)
        if args.memory_fraction is not None and args.allowed is not None:
            raise ValueError("give --memory-fraction or --allowed, not both")
        if any(getattr(args, name) < 1 for name in positive):
            flags = ["--" + name.replace("_", "-") for name in positive]
            raise ValueError(f"{', '.join(flags[:-1])} and {flags[-1]} must be positive")
        args.rank_options = rank_options(args)
    except ValueError as e:
        parser.print_usage(sys.stderr)
        print(f"python -m fragscope {command}: error: {e}", file=sys.stderr)
        return None
    return args, overrides, gpu, cap_args(args, gpu)


def cap_args(args, gpu):
    """`fragscope analyze|sweep` flags for the device and cap the flags name."""
    flags = ["--capacity", args.capacity] if args.capacity else ["--gpu", gpu.key]
    if args.memory_fraction is not None:
        flags += ["--memory-fraction", args.memory_fraction]
    if args.allowed is not None:
        flags += ["--allowed", args.allowed]
    return flags
