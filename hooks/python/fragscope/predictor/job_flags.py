"""The command-line flags of a predicted training step that `python -m fragscope carry` and
`fit` share (the step's kernels and optimizer, the rank of a data-parallel job, the GPU and its
cap), and the fragscope flags
that replay a log under that cap."""


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
    from .cli import add_rank_flags

    add_rank_flags(p)


def add_output_flags(p):
    p.add_argument("--fragscope", help="the fragscope program (default: $FRAGSCOPE_BIN, PATH)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def parse(parser, argv, command, positive):
    """Parses argv for `python -m fragscope COMMAND`: (args, config overrides, the GPU, the replay
    flags of its cap), or None after a usage error has been printed (exit 2). `positive`: the
    integer flags' names (argparse dests) that must be at least 1."""
    import sys

    from .cli import _parse_set, rank_options
    from .device import find_gpu

    args = parser.parse_args(argv)
    try:
        overrides = _parse_set(args.set)
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
