"""Predicts the training step of the 30 causal-LM types (tests/predict/causal_lm_types.py) with
fragscope's predictor and writes their per-phase peaks as the estimator's accuracy test data.

Each type: its two-layer default config, seq 2048 and micro-batch 1 (or --seq, --micro-batch: the
held-out setting is --seq 1024 --micro-batch 3, into causal_lm_predictions_seq1024_mb3.json), bf16
autocast, SDPA (eager for
the types without it, as transformers loads them), AdamW foreach and fused, two steps (the second
is the steady state) on an H100 80GB. Run from the repository root:

  PYTHONPATH=hooks/python FRAGSCOPE_LIB_DIR=build/hooks \\
    python3 scripts/estimator/predict_causal_lm_types.py \\
    --out tests/data/estimator/causal_lm_predictions.json

The configs are written beside the output (configs/TYPE.json) so that the estimator reads the
same files. A type the predictor fails on is recorded with its error, not skipped silently.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "predict"))
import causal_lm_types  # noqa: E402

SEQ = 2048
MICRO_BATCH = 1
# Two steps: the second is the steady state (the optimizer states made at the first step are
# alive through its forward and backward), the job's peak.
STEPS = 2
OPTIMIZERS = ["adamw-foreach", "adamw-fused"]


def attention(model_type):
    """SDPA, or eager where the model class has no SDPA path (GPT-J, GPT-Neo): what loading the
    model without an attn_implementation gives."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_class = getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type])
    return "sdpa" if model_class._supports_sdpa else "eager"


def predict(config_path, optimizer, attn, workdir, seq, micro_batch):
    log = os.path.join(workdir, "step.fslog")
    command = [sys.executable, "-m", "fragscope", "predict", "--config", config_path, "--seq",
               str(seq), "--micro-batch", str(micro_batch), "--optimizer", optimizer, "--steps",
               str(STEPS), "--attention", attn, "--out", log, "--json"]
    run = subprocess.run(command, capture_output=True, text=True)
    if os.path.exists(log):
        os.remove(log)
    if run.returncode != 0:
        return {"error": (run.stderr or run.stdout).strip().splitlines()[-1:]}
    result = json.loads(run.stdout)
    return {
        "peak_allocated_bytes": result["peak_allocated_bytes"],
        "peak_reserved_bytes": result["peak_reserved_bytes"],
        "phases": {p["marker"]: p["peak_allocated"] for p in result["phases"]},
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--types", nargs="*", default=causal_lm_types.TYPES)
    parser.add_argument("--seq", type=int, default=SEQ)
    parser.add_argument("--micro-batch", type=int, default=MICRO_BATCH)
    args = parser.parse_args()
    import torch
    import transformers

    config_dir = os.path.join(os.path.dirname(os.path.abspath(args.out)), "configs")
    os.makedirs(config_dir, exist_ok=True)
    data = {"setting": {"seq": args.seq, "micro_batch": args.micro_batch, "autocast": "bf16",
                        "gpu": "h100-80gb", "steps": STEPS},
            "torch": torch.__version__, "transformers": transformers.__version__,
            "date": datetime.date.today().isoformat(), "types": {}}
    if os.path.exists(args.out):
        with open(args.out) as f:
            data["types"] = json.load(f).get("types", {})
    for model_type in args.types:
        config_path = os.path.join(config_dir, f"{model_type}.json")
        with open(config_path, "w") as f:
            json.dump(causal_lm_types.two_layer_config(model_type), f, indent=1, sort_keys=True)
        entry = {"attention": attention(model_type)}
        with tempfile.TemporaryDirectory() as workdir:
            for optimizer in OPTIMIZERS:
                entry[optimizer] = predict(config_path, optimizer, entry["attention"], workdir,
                                           args.seq, args.micro_batch)
                print(model_type, optimizer, entry[optimizer].get("peak_allocated_bytes",
                                                                  entry[optimizer].get("error")),
                      flush=True)
        data["types"][model_type] = entry
        with open(args.out, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
