"""fragscope.largest_micro_batch: the largest micro-batch whose predicted step fits a GPU,
fragmentation included.

The estimator's answer (`fragscope estimate`, the verdict's largest_micro_batch) counts the
model's bytes; whether a step fits also depends on how the caching allocator places them. Each
micro-batch tried is predicted (fragscope.predict_hf) and its log replayed at the cap by
`fragscope analyze`: it fits when the replay has no OOM, of any cause. The search doubles the
micro-batch from 1 until a step does not fit, then bisects. The answer comes with the estimator's
for the same job and, near the peak allocated memory of the largest step that fits (the
timeline's highest point), the estimator's terms side by side with what the predicted trace holds
(the analysis's model_gap at that event).

    python -m fragscope fit --config gpt2 --seq 1024 --optimizer adamw-fused --gpu h100-80gb
"""

import json
import os
import tempfile

from .errors import PredictionError
from .carry import CarryError, _run, fragscope_program

GIB = float(1 << 30)


class FitError(RuntimeError):
    """A prediction or its replay failed (the message says which and why)."""


def _analyze(program, log, cap_args, extra=()):
    try:
        report = json.loads(_run([program, "analyze", log, "--no-sweep", "--no-summary",
                                  "--json", "-"] + list(cap_args) + list(extra)))
    except CarryError as e:
        raise FitError(str(e)) from e
    return report["ranks"][0]


def _peak_allocated_event(timeline):
    """The event of the timeline's point of highest allocated memory (a point holds the maxima
    of the events it covers and is named by its first)."""
    column = timeline["columns"].index("allocated_bytes")
    points = timeline["points"]
    return max(points, key=lambda p: p[column])[0] if points else 0


def try_micro_batch(config, seq, micro_batch, directory, program, cap_args, **job):
    """Predicts one micro-batch and replays it at the cap: a dict of its figures."""
    from .hf_loop import predict_hf

    log = os.path.join(directory, f"micro_batch_{micro_batch}.fslog")
    try:
        prediction = predict_hf(config, log, seq=seq, micro_batch=micro_batch, **job)
    except PredictionError as e:
        raise FitError(f"micro-batch {micro_batch}: the prediction failed: {e}") from e
    rank = _analyze(program, log, cap_args)
    ooms = rank["ooms"]
    result = {"micro_batch": micro_batch, "log": log, "fits": ooms["count"] == 0,
              "peak_allocated_bytes": prediction.peak_allocated,
              "peak_reserved_bytes": prediction.peak_reserved,
              "peak_allocated_event": _peak_allocated_event(rank["timeline"]),
              "estimated_largest_micro_batch":
                  ((rank.get("verdict") or {}).get("model") or {}).get("largest_micro_batch")}
    if ooms["explained"]:
        first = ooms["explained"][0]
        result["oom"] = {"phase": first["phase"], "cause": first["cause"],
                         "requested_bytes": first["requested_bytes"]}
    return result


def largest_micro_batch(config, seq, *, program=None, cap_args=(), max_micro_batch=1024,
                        directory=None, **job):
    """The search (see the module doc): a dict with `largest` (0 when not even 1 fits), the
    estimator's `estimated`, every micro-batch `tried` and the `terms` near the answer's peak."""
    program = fragscope_program(program)
    own = directory is None
    directory = directory or tempfile.mkdtemp(prefix="fragscope-fit-")
    tried = {}

    def fits(m):
        if m not in tried:
            tried[m] = try_micro_batch(config, seq, m, directory, program, cap_args, **job)
        return tried[m]["fits"]

    try:
        fitting, failing, m = 0, None, 1
        while True:
            if fits(m):
                fitting = m
            else:
                failing = m
            if failing is None:
                if m >= max_micro_batch:
                    break
                m = min(2 * m, max_micro_batch)
            else:
                if failing - fitting <= 1:
                    break
                m = (fitting + failing) // 2
        result = {"largest": fitting, "limited_by_max": failing is None,
                  "tried": [tried[k] for k in sorted(tried)], "terms": None, "estimated": None}
        if fitting:
            best = tried[fitting]
            result["estimated"] = best["estimated_largest_micro_batch"]
            rank = _analyze(program, best["log"], cap_args,
                            ["--at", str(best["peak_allocated_event"])])
            result["terms"] = rank.get("model_gap")
        elif tried:
            result["estimated"] = tried[1]["estimated_largest_micro_batch"]
        return result
    finally:
        if own:
            for name in os.listdir(directory):
                os.remove(os.path.join(directory, name))
            os.rmdir(directory)


def _parser():
    import argparse

    from .job_flags import add_output_flags, add_step_flags

    p = argparse.ArgumentParser(
        prog="python -m fragscope fit",
        description="The largest micro-batch whose predicted step fits the GPU, fragmentation "
        "included (each tried micro-batch predicted and replayed at the cap), beside the "
        "estimator's. hooks/README.md, 'Predicting a job'.")
    p.add_argument("--config", required=True,
                   help="a Hugging Face config.json, or a model type (gpt2, llama)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config field (JSON value), repeatable")
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--steps", type=int, default=2,
                   help="steps per prediction (2: the optimizer's states live in the second)")
    p.add_argument("--max-micro-batch", type=int, default=1024)
    p.add_argument("--mode", choices=["training", "inference"], default="training")
    add_step_flags(p)
    p.add_argument("--keep", metavar="DIR", help="keep the predicted logs in DIR")
    add_output_flags(p)
    return p


def main(argv):
    """`python -m fragscope fit`: exit 0 done, 1 a prediction or replay failed, 2 usage."""
    import sys

    from .job_flags import parse

    parsed = parse(_parser(), argv, "fit", ("seq", "steps", "max_micro_batch"))
    if parsed is None:
        return 2
    args, overrides, gpu, device_flags = parsed
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    try:
        result = largest_micro_batch(
            args.config, args.seq, program=args.fragscope, cap_args=device_flags,
            max_micro_batch=args.max_micro_batch, directory=args.keep, steps=args.steps,
            mode=args.mode, optimizer=args.optimizer, dtype=args.dtype,
            attention=args.attention, recompute=args.recompute, gpu=gpu.key, conf=args.conf,
            overrides=overrides, **args.rank_options)
    except (FitError, CarryError, OSError) as e:
        print(f"python -m fragscope fit: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    for t in result["tried"]:
        oom = t.get("oom")
        outcome = "fits" if t["fits"] else (
            f"OOM in {oom['phase']} ({oom['cause']}, {oom['requested_bytes']} bytes)" if oom
            else "OOM")
        print(f"  micro-batch {t['micro_batch']:5}  peak allocated "
              f"{t['peak_allocated_bytes'] / GIB:8.2f} GiB  reserved "
              f"{t['peak_reserved_bytes'] / GIB:8.2f} GiB  {outcome}")
    more = " (the --max-micro-batch; larger ones were not tried)" if result["limited_by_max"] \
        else ""
    estimated = result["estimated"]
    # A rank of a tensor-parallel job records its layout, which the estimator's torch-autocast
    # activation model does not split.
    why = ("its activation model does not split over --tp" if args.tp > 1 else
           "no footprint from the traces' model record")
    estimator = (f"the estimator's: {estimated}" if estimated is not None else
                 f"the estimator gives none ({why})")
    print(f"largest micro-batch that fits, fragmentation included: {result['largest']}{more}; "
          f"{estimator}")
    terms = result.get("terms")
    if terms:
        print(f"the estimator's terms beside the predicted trace of micro-batch "
              f"{result['largest']} {terms['where']} (where the timeline's highest point starts):")
        for term in terms["terms"]:
            print(f"  {term['category']:12} estimated {term['estimated_bytes'] / GIB:8.2f} GiB"
                  f"   in the trace {term['measured_bytes'] / GIB:8.2f} GiB")
        for line in terms["lines"]:
            print(f"  {line}")
    return 0
