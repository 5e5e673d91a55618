"""Writes tests/estimator/hf_parameter_counts.json: for each decoder-only type of
tests/predict/causal_lm_types.py, its two-layer config (as a config.json holds it) and the
parameter count of AutoModelForCausalLM.from_config(config) built on the meta device
(and, under "variants", configs with the structure switches the defaults leave off):
sum(p.numel() for p in model.parameters()), tied weights once. The estimator's count of each
config must equal it (tests/estimator/hf_parameter_counts_test.cc).

    python3 tests/estimator/make_hf_parameter_counts.py [--check]

--check compares with the committed file instead of writing it, and exits 1 naming every type
whose config or count differs (a transformers change shows there); without torch or transformers
it prints "skipped: ..." (ctest's estimator.hf_parameter_counts reports it skipped).
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUTPUT = os.path.join(HERE, "hf_parameter_counts.json")
sys.path.insert(0, os.path.join(HERE, "..", "predict"))


# Configs that switch on the structure the default configs leave off, each a type's two-layer
# config with these keys changed: name, model type, changes.
VARIANTS = [
    ("llama+biases", "llama", {"attention_bias": True, "mlp_bias": True}),
    ("helium+attention_bias", "helium", {"attention_bias": True}),
    ("qwen3+attention_bias", "qwen3", {"attention_bias": True}),
    ("gemma+untied", "gemma", {"tie_word_embeddings": False}),
    ("falcon+new_decoder_architecture", "falcon",
     {"new_decoder_architecture": True, "hidden_size": 4096, "num_attention_heads": 32,
      "num_kv_heads": 8, "bias": True}),
    ("falcon+one_norm_new_architecture", "falcon",
     {"new_decoder_architecture": True, "num_ln_in_parallel_attn": 1, "hidden_size": 4096,
      "num_attention_heads": 32, "num_kv_heads": 8}),
    ("falcon+sequential_mha", "falcon", {"parallel_attn": False, "multi_query": False}),
    ("stablelm+qk_layernorm+parallel", "stablelm",
     {"qk_layernorm": True, "use_parallel_residual": True, "use_qkv_bias": True}),
    ("phi+qk_layernorm", "phi", {"qk_layernorm": True}),
    ("cohere+qk_norm+bias", "cohere", {"use_qk_norm": True, "attention_bias": True}),
    ("qwen2_moe+mlp_only_layers", "qwen2_moe", {"mlp_only_layers": [0]}),
    ("qwen3_moe+decoder_sparse_step", "qwen3_moe", {"decoder_sparse_step": 2}),
    ("deepseek_v3+no_q_lora+bias", "deepseek_v3", {"q_lora_rank": None, "attention_bias": True}),
    ("opt+no_affine_no_bias", "opt", {"layer_norm_elementwise_affine": False,
                                      "enable_bias": False}),
    ("gpt_bigcode+mha", "gpt_bigcode", {"multi_query": False}),
    ("gpt_neox+sequential", "gpt_neox", {"use_parallel_residual": False,
                                         "attention_bias": False}),
    ("starcoder2+no_bias", "starcoder2", {"use_bias": False}),
    # Published sizes: Falcon-40B (new decoder architecture, 8 KV heads) and DeepSeek-V3 (61
    # layers, the first 3 dense).
    ("falcon-40b", "falcon",
     {"num_hidden_layers": 60, "hidden_size": 8192, "num_attention_heads": 128,
      "num_kv_heads": 8, "new_decoder_architecture": True, "ffn_hidden_size": None}),
    ("deepseek-v3-671b", "deepseek_v3", {"num_hidden_layers": 61, "first_k_dense_replace": 3}),
]


def count_parameters(model_type, config_dict):
    """The model's parameter count, built on the meta device from the config as a file gives it."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config = CONFIG_MAPPING[model_type].from_dict(config_dict)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def generate():
    import transformers
    from causal_lm_types import TYPES, two_layer_config

    def entry(name, model_type, changes):
        config = two_layer_config(model_type)
        config.update(changes)
        # A JSON round trip: what a config.json of it holds (tuples become lists).
        config = json.loads(json.dumps(config, default=str))
        return {"model_type": name, "parameters": count_parameters(model_type, config),
                "config": config}

    return {"transformers": transformers.__version__,
            "generated_by": "tests/estimator/make_hf_parameter_counts.py",
            "types": [entry(t, t, {}) for t in TYPES],
            "variants": [entry(*v) for v in VARIANTS]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="compare with the committed file instead of writing it")
    args = parser.parse_args()
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"skipped: {e.name or 'torch/transformers'} is not installed ({e})")
        return 0 if args.check else 1
    fresh = generate()
    if not args.check:
        with open(OUTPUT, "w") as f:
            json.dump(fresh, f, indent=1, sort_keys=False, allow_nan=False)
            f.write("\n")
        print(f"wrote {len(fresh['types'])} types to {OUTPUT}")
        return 0
    with open(OUTPUT) as f:
        committed = json.load(f)
    old = {e["model_type"]: e for e in committed["types"] + committed["variants"]}
    problems = []
    for entry in fresh["types"] + fresh["variants"]:
        t = entry["model_type"]
        if t not in old:
            problems.append(f"{t}: not in the committed file")
        elif old[t]["parameters"] != entry["parameters"]:
            problems.append(f"{t}: transformers {fresh['transformers']} counts "
                            f"{entry['parameters']:,}, the committed file (transformers "
                            f"{committed['transformers']}) {old[t]['parameters']:,}")
        elif old[t]["config"] != entry["config"]:
            keys = sorted(k for k in set(old[t]["config"]) | set(entry["config"])
                          if old[t]["config"].get(k) != entry["config"].get(k))
            problems.append(f"{t}: config differs in {', '.join(keys)}")
    for t in sorted(set(old) - {e["model_type"] for e in fresh["types"] + fresh["variants"]}):
        problems.append(f"{t}: in the committed file but no longer generated")
    for p in problems:
        print(p)
    print(f"{len(fresh['types'])} types and {len(fresh['variants'])} variants compared, "
          f"{len(problems)} differ")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
