"""The models and the training loop of the round-2 GPU steps (predict_accuracy.py,
big_job_check.py): the standard loop of `fragscope.predict_hf` (random init on the device, SDPA,
bf16 autocast, loss = model(ids, labels=ids).loss, backward, fused AdamW step,
zero_grad(set_to_none=True), markers "step N / forward|backward|optimizer"), written once so that
the GPU runs it natively and the CPU dry run runs it under fragscope's simulated device
(`fragscope.predictor.capture.capture`).
"""
import contextlib
import gc

# Hugging Face config dicts (model_type first): what `python -m fragscope predict --config` reads.
GPT2_124M = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12,
             "vocab_size": 50257, "n_positions": 1024}
GPT2_355M = dict(GPT2_124M, n_layer=24, n_embd=1024, n_head=16)
TINYLLAMA_1B = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632,
                "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4,
                "vocab_size": 32000, "max_position_embeddings": 2048,
                "tie_word_embeddings": False}
MISTRAL_03B = {"model_type": "mistral", "hidden_size": 1024, "intermediate_size": 3584,
               "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": 8,
               "vocab_size": 32000, "max_position_embeddings": 4096,
               "tie_word_embeddings": False}
LLAMA2_7B_8L = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
                "num_hidden_layers": 8, "num_attention_heads": 32, "num_key_value_heads": 32,
                "vocab_size": 32000, "max_position_embeddings": 4096,
                "tie_word_embeddings": False}
MIXTRAL_2L = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
              "num_hidden_layers": 2, "num_attention_heads": 32, "num_key_value_heads": 8,
              "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000,
              "max_position_embeddings": 4096, "tie_word_embeddings": False}

# name: (config, [(seq, micro_batch), ...]). Fits one H100 (80 GB) with fused AdamW states.
MODELS = {
    "gpt2-124m": (GPT2_124M, [(512, 8), (1024, 8)]),
    "gpt2-355m": (GPT2_355M, [(512, 8), (1024, 4)]),
    "tinyllama-1.1b": (TINYLLAMA_1B, [(1024, 4), (2048, 2)]),
    "mistral-0.3b-gqa": (MISTRAL_03B, [(1024, 4), (2048, 4)]),
    "llama2-7b-8l": (LLAMA2_7B_8L, [(1024, 2), (2048, 1)]),
    "mixtral-2l": (MIXTRAL_2L, [(1024, 2), (2048, 1)]),
}
# The CPU dry run: the same kinds of model (dense MHA, GQA, MoE) with two layers and one setting,
# so that it runs in seconds (fake tensors' sizes cost nothing).
DRY_MODELS = {
    "gpt2-2l": (dict(GPT2_124M, n_layer=2), [(256, 4)]),
    "mistral-2l-gqa": (dict(MISTRAL_03B, num_hidden_layers=2), [(512, 2)]),
    "mixtral-2l-small": (dict(MIXTRAL_2L, hidden_size=512, intermediate_size=1024,
                              num_attention_heads=8, num_key_value_heads=4,
                              num_local_experts=4), [(256, 2)]),
}


# Round 3: architectures not yet recorded, each a two-layer model of its type's default width
# (transformers 5.17's AutoConfig.for_model defaults; tests/predict/causal_lm_types.py), a few
# shrunk where the default would not train on an 80 GB GPU. Run with fused and with foreach AdamW.
def _two_layers(model_type, **overrides):
    return dict({"model_type": model_type, "num_hidden_layers": 2}, **overrides)


ROUND3_MODELS = {
    "qwen2-2l": (_two_layers("qwen2"), [(1024, 4), (2048, 2)]),
    "qwen3-moe-2l": (_two_layers("qwen3_moe", num_experts=32), [(1024, 4), (2048, 2)]),
    "gemma2-2l": (_two_layers("gemma2", layer_types=["sliding_attention", "full_attention"]),
                  [(1024, 4), (2048, 2)]),
    "phi3-2l": (_two_layers("phi3"), [(1024, 4), (2048, 2)]),
    "falcon-2l": (_two_layers("falcon"), [(1024, 4), (2048, 2)]),
    "olmo2-2l": (_two_layers("olmo2"), [(1024, 4), (2048, 2)]),
    "deepseek-v3-2l": (_two_layers("deepseek_v3", first_k_dense_replace=1, n_routed_experts=16,
                                   hidden_size=2048, intermediate_size=5632,
                                   moe_intermediate_size=1024, num_attention_heads=16,
                                   num_key_value_heads=16), [(1024, 2), (2048, 1)]),
    "starcoder2-2l": (_two_layers("starcoder2"), [(1024, 4), (2048, 2)]),
}
# Its dry run: one MoE model with shared experts, in seconds.
ROUND3_DRY_MODELS = {
    "qwen2-moe-2l-small": (_two_layers("qwen2_moe", hidden_size=256, intermediate_size=512,
                                       moe_intermediate_size=128, shared_expert_intermediate_size=256,
                                       num_experts=4, num_attention_heads=4,
                                       num_key_value_heads=2, vocab_size=1024), [(128, 2)]),
}
OPTIMIZERS = ("fused", "foreach")


def models(dry_run, round3=False):
    if round3:
        return ROUND3_DRY_MODELS if dry_run else ROUND3_MODELS
    return DRY_MODELS if dry_run else MODELS


def hf_config(config):
    """A transformers config from a dict of MODELS (model_type first)."""
    from transformers import AutoConfig

    data = dict(config)
    return AutoConfig.for_model(data.pop("model_type"), **data)


def build(config, optimizer="fused"):
    """The model on device "cuda" (seed 0, SDPA) and its AdamW, fused or foreach;
    (model, optimizer)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(hf_config(config), attn_implementation="sdpa")
    model.train()
    flags = {"fused": {"fused": True}, "foreach": {"foreach": True}}[optimizer]
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4, **flags)


def train(model, opt, vocab, shapes, mark, first_step=0, autocast=True):
    """One step per (seq, micro_batch) of `shapes`, with predict_hf's markers; bf16 autocast
    unless `autocast` is False (FSDP2 computes in its MixedPrecisionPolicy's dtype)."""
    import torch

    for i, (seq, micro_batch) in enumerate(shapes):
        step = first_step + i
        ids = torch.randint(0, vocab, (micro_batch, seq), device="cuda")
        mark(f"step {step} / forward")
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = model(input_ids=ids, labels=ids).loss
        mark(f"step {step} / backward")
        loss.backward()
        mark(f"step {step} / optimizer")
        opt.step()
        opt.zero_grad(set_to_none=True)
        del loss, ids


def release():
    """Everything the previous run left in PyTorch's cache goes back to the device, cuBLAS's
    workspaces included, so that the next run in the process starts as a fresh process would."""
    import torch

    gc.collect()
    torch.cuda.synchronize()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def run(config, shapes, mark, optimizer="fused"):
    """Builds the model and trains one step per shape (AdamW `optimizer`: fused or foreach);
    returns None, or the first line of the OutOfMemoryError that ended it. The model is gone when
    this returns."""
    import torch

    mark("init / weights")
    try:
        model, opt = build(config, optimizer)
        train(model, opt, hf_config(config).vocab_size, shapes, mark)
        torch.cuda.synchronize()
        return None
    except torch.OutOfMemoryError as e:
        return str(e).splitlines()[0][:300]


@contextlib.contextmanager
def simulated(log, gpu, conf=None):
    """The dry run's device: fragscope's capture on the simulated `gpu`; yields (prediction,
    mark); the prediction's figures are complete when the block has ended."""
    from fragscope.predictor.capture import capture

    with capture(log, gpu=gpu, conf=conf) as (prediction, mark):
        yield prediction, mark


def first_json(text):
    """The JSON object that starts the first line beginning with "{" in a child's output (its
    stdout, with stderr after it)."""
    import json

    start = 0 if text.startswith("{") else text.index("\n{") + 1
    return json.JSONDecoder().raw_decode(text, start)[0]
