"""Predicts two training steps of a Hugging Face config with the optimizers fragscope's predict
command does not offer (AdamW for-loop, SGD with and without momentum), for the estimator's
optimizer-step tests (tests/estimator/optimizer_step_test.cc): seq 2048, micro-batch 1, bf16
autocast, SDPA, zero_grad(set_to_none=True).

  PYTHONPATH=hooks/python FRAGSCOPE_LIB_DIR=build/hooks \\
    python3 scripts/estimator/predict_optimizers.py tests/data/estimator/configs/llama.json

Prints each optimizer's peak allocated bytes.
"""
import os
import sys
import tempfile

OPTIMIZERS = ("adamw-for-loop", "sgd-momentum", "sgd")


def main():
    import torch
    from transformers import AutoModelForCausalLM

    import fragscope
    from fragscope.predictor import capture
    from fragscope.predictor.hf_loop import load_config

    cfg = load_config(sys.argv[1], None)
    for kind in OPTIMIZERS:
        def make():
            with torch.device("cuda"):
                model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
            model.train()
            if kind == "adamw-for-loop":
                opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
            else:
                opt = torch.optim.SGD(model.parameters(), lr=1e-4,
                                      momentum=0.9 if kind == "sgd-momentum" else 0)
            return model, opt

        def step(state, index):
            model, opt = state
            ids = torch.randint(0, cfg.vocab_size, (1, 2048), device="cuda")
            capture.current_mark(f"step {index} / forward")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
            capture.current_mark(f"step {index} / backward")
            loss.backward()
            capture.current_mark(f"step {index} / optimizer")
            opt.step()
            opt.zero_grad(set_to_none=True)

        with tempfile.TemporaryDirectory() as tmp:
            prediction = fragscope.predict(make, step, os.path.join(tmp, "p.fslog"), steps=2)
        print(kind, prediction.peak_allocated, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
