"""The decoder-only causal-LM types the predictor and the estimator are checked on, drawn from
transformers 5.17's MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, and each one's two-layer config: the type's
default config (full width), its layer count set to 2. DeepSeek-V3 keeps one dense layer before
its MoE layer (first_k_dense_replace = 1), so both kinds are present."""

TYPES = ["llama", "mistral", "mixtral", "gpt2", "opt", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe",
         "gemma", "gemma2", "gemma3_text", "phi3", "falcon", "olmo2", "starcoder2", "granite",
         "cohere", "stablelm", "gpt_neox", "deepseek_v3", "olmoe", "gpt_bigcode", "phi", "olmo",
         "gptj", "gpt_neo", "helium", "smollm3", "granitemoe"]

LAYERS = 2


def two_layer_config(model_type):
    """The config of `model_type` with two layers, as a dict (a config.json's content)."""
    from transformers import AutoConfig

    default = AutoConfig.for_model(model_type)
    overrides = {}
    layer_key = next(k for k in ("num_hidden_layers", "n_layer", "num_layers")
                     if k in default.to_dict())
    overrides[layer_key] = LAYERS
    if model_type == "deepseek_v3":
        overrides["first_k_dense_replace"] = 1
    if model_type == "gpt_neo":
        overrides["attention_types"] = [[["global", "local"], LAYERS // 2]]
    config = AutoConfig.for_model(model_type, **overrides).to_dict()
    # Per-layer lists sized for the default depth are cut to the two layers.
    for key in ("layer_types", "mlp_layer_types"):
        if isinstance(config.get(key), list) and len(config[key]) > LAYERS:
            config[key] = config[key][:LAYERS]
    config["model_type"] = model_type
    return config
