"""The torch-autocast terms of tensor- and pipeline-parallel ranks, LoRA, QLoRA and a generate
(estimator/autocast_parallel.h, lora_activations.h, inference_memory.h) against fragscope's
predictor, on models they were not written from.

The terms were fitted on a small Llama (h 512, 4 layers, 8 heads of 128, 4 key/value heads, f 1536,
V 32000; tests/estimator/autocast_parallel_test.cc). Checked here on a Qwen2 (h 768, 12 heads of
64, 4 key/value heads, q/k/v biases, f 2048, V 50000) and a Mistral (h 640, 10 heads of 64, 2
key/value heads, f 1792, V 32768), both 4 layers: each case's activation roles (saved_activations +
temporaries, `fragscope analyze LOG --json -`) at the moment the estimate's backward start
describes, against the estimate's activation category (`fragscope estimate --json`: the 16-bit
weight copies of full fine-tuning, the activations_* terms, loss_backward), within TOLERANCE.
That moment: the largest of the rank's forward phases' demand peaks, and of its backward phases'
on a rank that computes the loss (the loss backward is its peak); a generate's prefill peak.

The measured figures are committed (tests/data/estimator/parallel_predictions.json, with the
predictor's command of each case); --predict regenerates them (minutes: one prediction a case),
with FRAGSCOPE_LIB_DIR and PYTHONPATH=hooks/python as for `fragscope predict`:

  FRAGSCOPE_BIN=build/fragscope python3 tests/estimator/parallel_terms_check.py [--predict]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data", "estimator", "parallel_predictions.json")
CONFIGS = os.path.join(HERE, "..", "data", "estimator", "parallel_configs")
TOLERANCE = 0.03

QWEN2 = ["--seq", "256", "--micro-batch", "3"]
MISTRAL = ["--seq", "384", "--micro-batch", "1"]
TRAIN = ["--train", "--activation-model", "torch-autocast", "--flash-attention", "--no-dropout",
         "--optimizer", "adamw-foreach"]
INFER = ["--infer", "--dtype", "fp32", "--autocast", "bf16"]

# name: (config, predictor flags, estimate flags)
CASES = {
    "qwen2 tp 2": ("qwen2", QWEN2 + ["--tp", "2"], TRAIN + QWEN2 + ["--tp", "2", "--sp"]),
    "qwen2 tp 4": ("qwen2", QWEN2 + ["--tp", "4"], TRAIN + QWEN2 + ["--tp", "4", "--sp"]),
    "qwen2 pp 2 1f1b rank 0 (m 3)": (
        "qwen2", QWEN2 + ["--pp", "2", "--pp-schedule", "1f1b", "--pp-microbatches", "3"],
        TRAIN + QWEN2 + ["--pp", "2", "--pp-schedule", "1f1b", "--microbatches", "3"]),
    "qwen2 pp 2 gpipe rank 1 (m 3)": (
        "qwen2",
        QWEN2 + ["--pp", "2", "--pp-schedule", "gpipe", "--pp-microbatches", "3", "--rank", "1"],
        TRAIN + QWEN2 + ["--pp", "2", "--pp-schedule", "gpipe", "--microbatches", "3",
                         "--pp-rank", "1"]),
    "qwen2 pp 2 interleaved rank 1 (m 4)": (
        "qwen2", QWEN2 + ["--pp", "2", "--pp-schedule", "interleaved-1f1b", "--pp-microbatches",
                          "4", "--rank", "1"],
        TRAIN + QWEN2 + ["--pp", "2", "--pp-schedule", "interleaved-1f1b", "--microbatches", "4",
                         "--pp-rank", "1"]),
    "qwen2 LoRA r 8 all-linear": (
        "qwen2", QWEN2 + ["--lora", "--lora-targets", "all-linear"],
        TRAIN + QWEN2 + ["--precision", "bf16", "--lora-rank", "8", "--lora-targets", "all"]),
    "qwen2 QLoRA r 8 all-linear": (
        "qwen2", QWEN2 + ["--qlora", "--lora-targets", "all-linear"],
        TRAIN + QWEN2 + ["--lora-rank", "8", "--lora-targets", "all", "--qlora"]),
    "qwen2 generate 8": ("qwen2", QWEN2 + ["--generate", "8"],
                         INFER + ["--batch", "3", "--prompt", "256", "--context", "263"]),
    "mistral tp 2": ("mistral", MISTRAL + ["--tp", "2"], TRAIN + MISTRAL + ["--tp", "2", "--sp"]),
    "mistral pp 2 1f1b rank 1 (m 4)": (
        "mistral",
        MISTRAL + ["--pp", "2", "--pp-schedule", "1f1b", "--pp-microbatches", "4", "--rank", "1"],
        TRAIN + MISTRAL + ["--pp", "2", "--pp-schedule", "1f1b", "--microbatches", "4",
                           "--pp-rank", "1"]),
    "mistral pp 2 interleaved rank 0 (m 4)": (
        "mistral", MISTRAL + ["--pp", "2", "--pp-schedule", "interleaved-1f1b",
                              "--pp-microbatches", "4"],
        TRAIN + MISTRAL + ["--pp", "2", "--pp-schedule", "interleaved-1f1b", "--microbatches",
                           "4"]),
    "mistral LoRA r 16 q,k,v,o": (
        "mistral", MISTRAL + ["--lora", "--lora-rank", "16", "--lora-targets",
                              "q_proj,k_proj,v_proj,o_proj"],
        TRAIN + MISTRAL + ["--lora-rank", "16", "--lora-targets", "q,k,v,o"]),
    "mistral QLoRA r 16 q,k,v,o": (
        "mistral", MISTRAL + ["--qlora", "--lora-rank", "16", "--lora-targets",
                              "q_proj,k_proj,v_proj,o_proj"],
        TRAIN + MISTRAL + ["--lora-rank", "16", "--lora-targets", "q,k,v,o", "--qlora"]),
    "mistral generate 4": ("mistral", MISTRAL + ["--generate", "4"],
                           INFER + ["--batch", "1", "--prompt", "384", "--context", "387"]),
}


def run(command, **kwargs):
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{done.stderr or done.stdout}")
    return done.stdout


def measured_bytes(phases, loss_rank, generate):
    """The activation roles at the moment the estimate's backward start (or prefill) describes."""
    def act(phase):
        roles = phase["roles_at_peak_demand"]
        return roles.get("saved_activations", 0) + roles.get("temporaries", 0)
    if generate:
        return act(next(p for p in phases if p["phase"] == "step 0 / prefill"))
    kinds = ("step 0 / forward", "step 0 / backward") if loss_rank else ("step 0 / forward",)
    return max(act(p) for p in phases if p["phase"].startswith(kinds))


def predict(names):
    import torch
    import transformers

    bin_path = os.environ["FRAGSCOPE_BIN"]
    data = {"predictor": f"fragscope predict (torch {torch.__version__.split('+')[0]}, "
                         f"transformers {transformers.__version__}, kernels as on an H100 80GB)",
            "measured": "saved_activations + temporaries at the moment "
                        "tests/estimator/parallel_terms_check.py names",
            "cases": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            config, flags, _ = CASES[name]
            log = os.path.join(tmp, "case.fslog")
            command = ["predict", "--config", f"{config}.json", *flags]
            run([sys.executable, "-m", "fragscope", *command, "--out", log], cwd=CONFIGS)
            report = json.loads(run([bin_path, "analyze", log, "--threads", "1", "--no-sweep",
                                     "--json", "-"]))["ranks"][0]
            rank = int(flags[flags.index("--rank") + 1]) if "--rank" in flags else 0
            loss_rank = "--pp" not in flags or rank == int(flags[flags.index("--pp") + 1]) - 1
            data["cases"][name] = {
                "command": "fragscope " + " ".join(command),
                "measured_bytes": measured_bytes(report["phases"], loss_rank,
                                                 "--generate" in flags)}
            print(f"{name}: {data['cases'][name]['measured_bytes'] / 2**20:.2f} MiB", flush=True)
    return data


def estimated_bytes(config, flags):
    out = json.loads(run([os.environ["FRAGSCOPE_BIN"], "estimate", "--model-json",
                          os.path.join(CONFIGS, f"{config}.json"), *flags, "--json", "-"]))
    lora = "--lora-rank" in flags
    return sum(t["bytes"] for t in out["terms"]
               if t["key"].startswith("activations") or t["key"] == "loss_backward"
               or (t["key"] == "weights" and not lora and "--infer" not in flags))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--predict", action="store_true", help="regenerate the measured data")
    args = parser.parse_args()
    if args.predict:
        with open(DATA, "w", encoding="utf-8") as f:
            json.dump(predict(list(CASES)), f, indent=1)
            f.write("\n")
    with open(DATA, encoding="utf-8") as f:
        data = json.load(f)["cases"]
    failed = []
    print(f"{'case':42s} {'estimated':>11s} {'predicted':>11s}  error")
    for name, (config, _, flags) in CASES.items():
        estimated = estimated_bytes(config, flags)
        measured = data[name]["measured_bytes"]
        error = estimated / measured - 1
        print(f"{name:42s} {estimated / 2**20:8.2f} MiB {measured / 2**20:8.2f} MiB "
              f"{100 * error:+6.1f} %")
        if abs(error) > TOLERANCE:
            failed.append(name)
    if failed:
        sys.exit(f"beyond {100 * TOLERANCE:.0f} %: {', '.join(failed)}")


if __name__ == "__main__":
    main()
