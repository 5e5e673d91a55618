"""python -m fragscope predict ...: a job's CUDA allocations predicted on a machine without a GPU;
python -m fragscope carry ...: a real log that ends at an OOM carried past it (carry.py);
python -m fragscope fit ...: the largest micro-batch that fits, fragmentation included (fit.py).

    python -m fragscope predict --config gpt2 --seq 1024 --micro-batch 16 --out pred.fslog
    python -m fragscope predict --config config.json --set num_hidden_layers=80 ...
    python -m fragscope predict --model-fn mymod:make --step-fn mymod:step --steps 2 --out p.fslog
    python -m fragscope predict --config gpt2 ... --parallel fsdp2 --world-size 8 --rank 3 ...
    python -m fragscope predict --config llama ... --parallel fsdp2 --tp 8 --world-size 64 ...
    python -m fragscope predict --config llama ... --pp 4 --pp-schedule 1f1b --rank 0 ...
    python -m fragscope predict --config llama --seq 2048 --micro-batch 4 --qlora \
        --lora-rank 16 --lora-targets all-linear --out qlora.fslog   # peft + bitsandbytes
    python -m fragscope predict --config llama --seq 512 --micro-batch 8 --generate 128 \
        --cache static --out gen.fslog                  # transformers' generate (inference)
    python -m fragscope predict --config gpt2 --seq 512 --micro-batch 8 --mode inference \
        --cuda-graphs --steps 10 --out graph.fslog      # the forward captured once, replayed
    python -m fragscope predict --config gpt2 --seq 1024 --micro-batch 8 \
        --compile --out compiled.fslog                  # model = torch.compile(model)

Then: fragscope analyze|sweep pred.fslog --gpu h100-80gb. Exit status: 0 done, 1 the prediction
failed (the message names what), 2 a usage error.
"""

import argparse
import importlib
import json
import sys

from .job_flags import add_rank_flags, parse_set, rank_options

GIB = float(1 << 30)


def _function(spec, flag):
    module, sep, name = spec.partition(":")
    if not sep:
        raise ValueError(f"{flag} {spec!r}: expected MODULE:FUNCTION")
    return getattr(importlib.import_module(module), name)


def _parser():
    p = argparse.ArgumentParser(
        prog="python -m fragscope predict",
        description="Predicts a PyTorch job's CUDA allocations on a CPU (no GPU, no weights) into "
        "an .fslog that `fragscope analyze|sweep LOG --gpu NAME` reads. hooks/README.md, "
        "'Predicting a job'.")
    p.add_argument("command", choices=["predict"])
    p.add_argument("--out", required=True, help="the .fslog to write")
    p.add_argument("--config", help="a Hugging Face config.json, or a model type (gpt2, llama)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config field (JSON value), repeatable")
    p.add_argument("--seq", type=int, help="sequence length (with --config)")
    p.add_argument("--micro-batch", type=int, help="micro-batch (with --config)")
    p.add_argument("--mode", choices=["training", "inference"],
                   help="training (the default) or inference (implied by --generate)")
    p.add_argument("--generate", type=int, metavar="N",
                   help="inference by transformers' generate: N new tokens after prompts of "
                   "--micro-batch x --seq tokens (a prefill, then a decode step per token)")
    p.add_argument("--cache", choices=["dynamic", "static"],
                   help="the KV cache of --generate (transformers' cache_implementation; "
                   "default dynamic)")
    p.add_argument("--optimizer", default="adamw",
                   choices=["adamw", "adamw-fused", "adamw-foreach", "sgd", "none"])
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16",
                   help="autocast dtype (fp32: no autocast)")
    p.add_argument("--attention", choices=["auto", "sdpa", "eager"], default="auto",
                   help="auto (default): as transformers chooses, SDPA unless the model has none, "
                   "then eager")
    p.add_argument("--recompute", action="store_true", help="gradient checkpointing")
    p.add_argument("--model-fn", help="MODULE:FUNCTION building the model (instead of --config)")
    p.add_argument("--step-fn", help="MODULE:FUNCTION(state, index) running one step")
    p.add_argument("--optimizer-fn",
                   help="MODULE:FUNCTION(model) making the optimizer after --parallel wraps the "
                   "model (the step then gets (model, optimizer))")
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--gpu", default="h100-80gb", help="the GPU whose kernels' choices to make")
    p.add_argument("--conf", default="", help="allocator settings (PYTORCH_CUDA_ALLOC_CONF)")
    p.add_argument("--json", action="store_true", help="print the phases as JSON")
    add_rank_flags(p)
    from .adapters import add_flags

    add_flags(p)
    from .cuda_graphs import add_flags as add_graph_flags

    add_graph_flags(p)
    from .compile import add_flags as add_compile_flags

    add_compile_flags(p)
    from .pipeline_loop import add_flags as add_pipeline_flags

    add_pipeline_flags(p)
    return p


def _generate_flags(args):
    """Resolves --mode with --generate (which implies inference); ValueError names a bad flag."""
    if args.generate is None:
        if args.cache is not None:
            raise ValueError("--cache goes with --generate")
        args.mode = args.mode or "training"
        return
    if not args.config:
        raise ValueError("--generate goes with --config")
    if args.mode == "training":
        raise ValueError("--generate predicts inference, not --mode training")
    if args.generate < 1:
        raise ValueError("--generate must be positive")
    args.mode = "inference"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["carry"]:
        from .carry import main as carry_main

        return carry_main(argv[1:])
    if argv[:1] == ["fit"]:
        from .fit import main as fit_main

        return fit_main(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        overrides = parse_set(args.set)
        if args.config and (args.model_fn or args.step_fn):
            raise ValueError("give --config or --model-fn/--step-fn, not both")
        if args.config and (args.seq is None or args.micro_batch is None):
            raise ValueError("--config needs --seq and --micro-batch")
        if not args.config and not (args.model_fn and args.step_fn):
            raise ValueError("give --config, or --model-fn and --step-fn")
        if args.steps < 1:
            raise ValueError("--steps must be positive")
        _generate_flags(args)
        from .pipeline_loop import options as pipeline_options

        pipeline = pipeline_options(args)  # one rank of a pipeline: predict_pp's flags
        ranks = {} if pipeline else rank_options(args, wrap_required=bool(args.config))
        from .adapters import options as adapter_options

        adapters = adapter_options(args)
        from .cuda_graphs import options as graph_options

        graphs = graph_options(args)
        from .compile import options as compile_options

        compiled = compile_options(args)
        if args.optimizer_fn and not (args.model_fn and args.parallel):
            raise ValueError("--optimizer-fn goes with --model-fn and --parallel")
        from .device import find_gpu

        find_gpu(args.gpu)
        make = _function(args.model_fn, "--model-fn") if args.model_fn else None
        step = _function(args.step_fn, "--step-fn") if args.step_fn else None
        make_optimizer = _function(args.optimizer_fn, "--optimizer-fn") if args.optimizer_fn \
            else None
    except (ValueError, ImportError, AttributeError) as e:
        parser.print_usage(sys.stderr)
        print(f"python -m fragscope predict: error: {e}", file=sys.stderr)
        return 2
    from .capture import predict
    from .errors import PredictionError

    try:
        if pipeline:
            from .pipeline_loop import predict_pp

            result = predict_pp(args.config, args.out, seq=args.seq, micro_batch=args.micro_batch,
                                steps=args.steps, optimizer=args.optimizer, dtype=args.dtype,
                                attention=args.attention, gpu=args.gpu, conf=args.conf,
                                overrides=overrides, **pipeline)
        elif args.config:
            from .hf_loop import predict_hf

            result = predict_hf(args.config, args.out, seq=args.seq, micro_batch=args.micro_batch,
                                steps=args.steps, mode=args.mode, optimizer=args.optimizer,
                                dtype=args.dtype, attention=args.attention,
                                recompute=args.recompute, gpu=args.gpu, conf=args.conf,
                                overrides=overrides, generate=args.generate, cache=args.cache,
                                **ranks, **adapters, **graphs, **compiled)
        else:
            result = predict(make, step, args.out, steps=args.steps, gpu=args.gpu,
                             conf=args.conf, make_optimizer=make_optimizer, **ranks,
                             **compiled)
    except (PredictionError, OSError) as e:
        print(f"python -m fragscope predict: {e}", file=sys.stderr)
        return 1
    attention = getattr(result, "attention", None)
    notes = getattr(result, "notes", [])
    if args.json:
        print(json.dumps({"log": args.out, "gpu": result.gpu.key, "parallel": args.parallel,
                          "world_size": args.world_size, "rank": args.rank, "tp": args.tp,
                          "ep": args.ep, "cp": args.cp,
                          "attention": attention, "notes": notes,
                          "params": getattr(result, "params", None),
                          "generated": getattr(result, "generated", None),
                          "adapter": getattr(result, "adapter", None),
                          "graph_pool": getattr(result, "graph_pool", None),
                          "compiled": getattr(result, "compiled", None) or None,
                          "pipeline": getattr(result, "pipeline", None),
                          "peak_allocated_bytes": result.peak_allocated,
                          "peak_reserved_bytes": result.peak_reserved,
                          "phases": [vars(p) for p in result.phases]}, indent=1))
    else:
        print(f"predicted {result.allocations} allocations into {args.out} "
              f"(kernels as on {result.gpu.name})")
        if attention is not None:
            how = "as transformers chooses" if args.attention == "auto" else "as asked"
            print(f"  attention: {attention} ({how})")
        if getattr(result, "adapter", None):
            from .adapters import describe

            print(f"  adapter: {describe(result.adapter)}")
        for note in notes:
            print(f"  assumed: {note}")
        if getattr(result, "graph_pool", None):
            print(f"  CUDA graph: the forward captured once into private pool "
                  f"{result.graph_pool}, replayed each step")
        if getattr(result, "compiled", None):
            c = result.compiled
            print(f"  torch.compile: {c['graphs']} graphs, {c['graph_breaks']} graph breaks"
                  + "".join(f"\n    break: {r}" for r in c["graph_break_reasons"]))
        generated = getattr(result, "generated", None)
        if generated:
            print(f"  KV cache at the end: {generated['cache']}, {generated['positions']} "
                  f"positions x {generated['layers']} layers, keys "
                  f"{'/'.join(generated['key_dtypes'])}, values "
                  f"{'/'.join(generated['value_dtypes'])}: {generated['bytes']} bytes")
        if pipeline:
            from .pipeline_loop import describe

            print(f"  rank {args.rank} of {args.world_size} ({describe(result.pipeline)}, fake "
                  f"process group)")
        elif args.world_size > 1 or args.parallel:
            how = args.parallel or ("" if args.tp > 1 else "wrapped by the model function")
            if args.tp > 1:
                how = f"tp {args.tp}" + (f" x {how} dp {args.world_size // args.tp}" if how
                                         else "")
            if args.ep > 1:
                how += (f" dp {args.world_size}, experts over ep {args.ep} "
                        f"({args.ep_routing} routing)")
            if args.cp > 1:
                how += f" over dp {args.world_size // args.cp} x cp {args.cp}"
            print(f"  rank {args.rank} of {args.world_size} ({how}, fake process group)")
        for p in result.phases:
            print(f"  {p.marker:28} {p.allocations:7} allocations   peak allocated "
                  f"{p.peak_allocated / GIB:8.3f} GiB   reserved {p.peak_reserved / GIB:8.3f} GiB")
        print(f"peak allocated {result.peak_allocated / GIB:.3f} GiB, peak reserved "
              f"{result.peak_reserved / GIB:.3f} GiB (fragscope's allocator, PyTorch defaults "
              f"unless --conf)")
        print(f"next: fragscope analyze {args.out} --gpu {result.gpu.key}")
    return 0
