"""fragscope.carry: a real log that ends at an OOM, carried past it with the predicted rest.

A job that ran out of memory leaves a log that stops at its OOM: replaying it under another
setting shows whether the setting gets past that allocation, not whether the step would then
complete. carry() predicts the same job (fragscope.predict_hf), aligns the real allocations up
to the OOM with the predicted ones (by allocation sizes, rounded as the allocator rounds them, in
order), and writes a log that is the real one up to the OOM followed by the prediction from the
request that failed: blocks live at the cut that the prediction frees later are the real blocks
matched to them. The sweep of that log (`fragscope sweep`) then says, for each setting, whether
the step completes or where it dies (the phase, by `fragscope analyze --conf` of that setting).

    python -m fragscope carry REAL.fslog --config gpt2 --seq 1024 --micro-batch 16 \\
        --optimizer adamw-fused --gpu h100-80gb --memory-fraction 0.2685 --out carried.fslog
"""

import difflib
import json
import os
import pickle
import shutil
import subprocess
import tempfile

from .. import _library
from .capture import CAPTURE_DEVICE_BYTES
from .errors import PredictionError

# How far past the last aligned allocation the failed request may be looked for in the prediction.
_SEARCH = 64


class CarryError(RuntimeError):
    """The real log and the prediction could not be put together (the message says why)."""


def _rounded(size):
    """The allocator's rounding of a request (512-byte blocks): what both logs agree on."""
    return max(512, (size + 511) // 512 * 512)


def fragscope_program(given=None):
    """The fragscope program: `given`, else $FRAGSCOPE_BIN, the installed package's, or PATH's."""
    if given:
        return given
    if os.environ.get("FRAGSCOPE_BIN"):
        return os.environ["FRAGSCOPE_BIN"]
    bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "fragscope")
    if os.path.isfile(bundled):
        return bundled
    found = shutil.which("fragscope")
    if not found:
        raise CarryError("cannot find the fragscope program: give --fragscope or FRAGSCOPE_BIN")
    return found


def _run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise CarryError(f"{' '.join(cmd)} failed (exit {p.returncode}): "
                         f"{(p.stderr or p.stdout).strip()[-500:]}")
    return p.stdout


def read_real_log(path, program):
    """The real log's allocations and frees up to its first OOM: ([("alloc", address, bytes) |
    ("free", address)], the failed request's bytes). Read through `fragscope convert` (a PyTorch
    snapshot: the device's trace in order)."""
    with tempfile.TemporaryDirectory() as tmp:
        snapshot = os.path.join(tmp, "real.pickle")
        _run([program, "convert", path, snapshot])
        with open(snapshot, "rb") as f:
            data = pickle.load(f)
    traces = data.get("device_traces") or []
    trace = next((t for t in traces if t), [])
    events = []
    for entry in trace:
        action = entry.get("action")
        if action == "alloc":
            events.append(("alloc", entry["addr"], entry["size"]))
        elif action == "free_requested":
            events.append(("free", entry["addr"]))
        elif action == "oom":
            return events, entry["size"]
    raise CarryError(f"{path}: the log records no OOM: there is nothing to carry past")


def _predicted_blocks(journal):
    """The prediction's journal with blocks numbered in allocation order (pointers are reused):
    [("alloc", block, bytes) | ("free", block) | ("mark", text)]; block n is allocation n."""
    live, out, count = {}, [], 0
    for entry in journal:
        if entry[0] == "alloc":
            live[entry[1]] = count
            out.append(("alloc", count, entry[2]))
            count += 1
        elif entry[0] == "free":
            block = live.pop(entry[1], None)
            if block is not None:
                out.append(("free", block))
        else:
            out.append(entry)
    return out


def align(real, real_oom, predicted):
    """The failed request's counterpart in the prediction and the pairs of allocations that
    match before it: (index of the predicted allocation, {real alloc index: predicted alloc
    index}), allocation indices counting allocations only."""
    real_sizes = [_rounded(e[2]) for e in real if e[0] == "alloc"]
    pred_sizes = [_rounded(e[2]) for e in predicted if e[0] == "alloc"]
    matcher = difflib.SequenceMatcher(None, real_sizes, pred_sizes, autojunk=False)
    pairs = {}
    for a, b, n in matcher.get_matching_blocks():
        for k in range(n):
            pairs[a + k] = b + k
    failed = len(real_sizes)
    before = [a for a in pairs if a < failed]
    start = pairs[max(before)] + (failed - max(before)) if before else 0
    want = _rounded(real_oom)
    for j in range(start, min(start + _SEARCH, len(pred_sizes))):
        if pred_sizes[j] == want:
            return j, {a: b for a, b in pairs.items() if a < failed and b < j}
    raise CarryError(f"the failed request ({real_oom} bytes) has no allocation of its size in the "
                     f"prediction after the {len(before)} real allocations aligned with it: the "
                     "prediction is not of the same job (check the model, shapes and settings)")


def write_carried(out, conf, real, predicted, cut, pairs):
    """Writes the carried log through fragscope's allocator on a simulated device: the real
    events, the prediction's markers placed before the real allocations aligned with the
    allocations they precede, then the prediction from allocation `cut` on. Returns counts."""
    import ctypes

    lib = _library.load(_library.ALLOC)
    lib.fragscope_simulate.argtypes = [ctypes.c_uint64, ctypes.c_char_p, ctypes.c_char_p]
    lib.fragscope_simulate.restype = ctypes.c_int
    if lib.fragscope_simulate(CAPTURE_DEVICE_BYTES, (conf or "").encode(), out.encode()) != 0:
        raise CarryError(lib.fragscope_last_error().decode())
    to_real = {b: a for a, b in pairs.items()}
    # The prediction's markers before the cut, keyed by the real allocation they precede.
    markers, pending, alloc_index = {}, [], 0
    position = None  # index in `predicted` of allocation `cut`
    for i, entry in enumerate(predicted):
        if entry[0] == "mark":
            pending.append(entry[1])
        elif entry[0] == "alloc":
            if alloc_index == cut:
                position = i - len(pending)
                break
            if pending:
                following = [b for b in range(alloc_index, cut) if b in to_real]
                if following:
                    a = to_real[following[0]] - (following[0] - alloc_index)
                    markers.setdefault(max(a, 0), []).extend(pending)
                    pending = []
            alloc_index += 1
    counts = {"real_events": len(real), "unmatched_frees": 0, "real_blocks_left": 0}

    def malloc(size):
        ptr = lib.fragscope_malloc(size, 0, None)
        if not ptr:
            raise CarryError("fragscope's allocator refused a request on the simulated device: "
                             + lib.fragscope_last_error().decode())
        return ptr

    real_ptr, real_block = {}, {}  # address -> pointer; real alloc index -> address
    index = 0
    for entry in real:
        if entry[0] == "alloc":
            for text in markers.get(index, []):
                lib.fragscope_mark(text.encode())
            real_ptr[entry[1]] = malloc(entry[2])
            real_block[index] = entry[1]
            index += 1
        elif entry[1] in real_ptr:
            lib.fragscope_free(real_ptr.pop(entry[1]), 0, 0, None)
    # Blocks the prediction made before the cut (block n is allocation n): the real block
    # matched to each, if still live.
    carried = {}
    for b in range(cut):
        address = real_block.get(to_real.get(b, -1))
        if address in real_ptr:
            carried[b] = real_ptr[address]
    remainder, carried_frees = {}, 0
    for entry in predicted[position:]:
        if entry[0] == "mark":
            lib.fragscope_mark(entry[1].encode())
        elif entry[0] == "alloc":
            remainder[entry[1]] = malloc(entry[2])
        elif entry[1] in remainder:
            lib.fragscope_free(remainder.pop(entry[1]), 0, 0, None)
        elif entry[1] in carried:
            lib.fragscope_free(carried.pop(entry[1]), 0, 0, None)
            carried_frees += 1
        else:
            counts["unmatched_frees"] += 1
    counts["real_blocks_left"] = len(real_ptr) - carried_frees
    lib.fragscope_flush()
    counts["predicted_allocations"] = sum(1 for e in predicted[position:] if e[0] == "alloc")
    return counts


def sweep_outcomes(program, log, cap_args):
    """Each sweep row of `log`: (label, "completes the step" | "dies at PHASE (N bytes)")."""
    sweep = json.loads(_run([program, "sweep", log, "--json", "-"] + cap_args))
    rows = []
    for row in sweep["sweep"]["configs"]:
        if row.get("error"):
            rows.append((row["label"], f"replay failed: {row['error']}"))
            continue
        if row["ooms"] == 0:
            rows.append((row["label"], "completes the step"))
            continue
        conf = "" if row["label"] == "(default)" else row["label"]
        report = json.loads(_run([program, "analyze", log, "--conf", conf, "--no-sweep",
                                  "--no-summary", "--json", "-"] + cap_args))
        explained = report["ranks"][0]["ooms"]["explained"]
        if explained:
            first = explained[0]
            rows.append((row["label"], f"dies at {first['phase'] or 'event ' + str(first['event'])}"
                         f" ({first['requested_bytes']} bytes)"))
        else:
            rows.append((row["label"], f"dies at event {row['first_oom_event']}"))
    return rows


def carry(real_log, out, *, config, seq, micro_batch, program=None, cap_args=(), conf="",
          **job):
    """Carries `real_log` past its OOM with the prediction of the same job (predict_hf's
    arguments); writes `out` and returns (counts, [(sweep row label, outcome)])."""
    from .hf_loop import predict_hf

    program = fragscope_program(program)
    real, failed = read_real_log(real_log, program)
    journal = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            predict_hf(config, os.path.join(tmp, "predicted.fslog"), seq=seq,
                       micro_batch=micro_batch, conf=conf, journal=journal, **job)
        except PredictionError as e:
            raise CarryError(f"the prediction failed: {e}") from e
    predicted = _predicted_blocks(journal)
    cut, pairs = align(real, failed, predicted)
    counts = write_carried(out, conf, real, predicted, cut, pairs)
    counts["aligned_allocations"] = len(pairs)
    return counts, sweep_outcomes(program, out, list(cap_args))


def _parser():
    import argparse

    from .job_flags import add_output_flags, add_step_flags

    p = argparse.ArgumentParser(
        prog="python -m fragscope carry",
        description="Carries a real log that ends at an OOM past it with the predicted rest of "
        "the step of the same job, and sweeps allocator settings over the whole step: each "
        "setting completes the step or dies at a phase. hooks/README.md, 'Predicting a job'.")
    p.add_argument("real", help="the job's .fslog, ending at its OOM")
    p.add_argument("--out", required=True, help="the carried .fslog to write")
    p.add_argument("--config", required=True,
                   help="the job's Hugging Face config.json, or a model type (gpt2, llama)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config field (JSON value), repeatable")
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--micro-batch", type=int, required=True)
    p.add_argument("--steps", type=int, default=1, help="steps to predict (the OOM's and before)")
    add_step_flags(p)
    add_output_flags(p)
    return p


def main(argv):
    """`python -m fragscope carry`: exit 0 done, 1 the logs could not be carried, 2 usage."""
    import sys

    from .job_flags import parse

    parsed = parse(_parser(), argv, "carry", ("seq", "micro_batch", "steps"))
    if parsed is None:
        return 2
    args, overrides, gpu, device_flags = parsed
    try:
        counts, rows = carry(args.real, args.out, config=args.config, seq=args.seq,
                             micro_batch=args.micro_batch, program=args.fragscope,
                             cap_args=device_flags, conf=args.conf, steps=args.steps,
                             optimizer=args.optimizer, dtype=args.dtype,
                             attention=args.attention, recompute=args.recompute, gpu=gpu.key,
                             overrides=overrides, **args.rank_options)
    except (CarryError, OSError) as e:
        print(f"python -m fragscope carry: {e}", file=sys.stderr)
        return 1
    completes = [label for label, outcome in rows if outcome == "completes the step"]
    if args.json:
        print(json.dumps({"log": args.out, "counts": counts,
                          "rows": [{"label": label, "outcome": outcome}
                                   for label, outcome in rows],
                          "completing": completes}, indent=1))
        return 0
    print(f"carried {args.real} past its OOM into {args.out}: {counts['real_events']} real "
          f"events ({counts['aligned_allocations']} allocations aligned with the prediction), "
          f"then {counts['predicted_allocations']} predicted allocations; "
          f"{counts['real_blocks_left']} real blocks the prediction never frees, "
          f"{counts['unmatched_frees']} predicted frees of blocks the real log did not make")
    width = max(len(label) for label, _ in rows)
    for label, outcome in rows:
        print(f"  {label:{width}}  {outcome}")
    if completes:
        print(f"{len(completes)} of {len(rows)} settings complete the step")
    else:
        print("no setting completes the step")
    return 0
