"""The model a job runs, as the JSON of an .fslog model record (format "fragscope.model/1").

The analyzer reads it back (analysis/explain/model_job.h) and compares the model's theoretical footprint
with the job's memory cap, without a --model flag. The record holds the model's Hugging Face
config (scalar entries only: a record carries at most 4096 bytes) and the job's shape.

The job's keys ("job": {...}; None values left out, the analyzer then says what it assumed):
  mode          "training" | "inference"
  training:     seq, micro_batch; dtype (the autocast dtype, "fp32": none), optimizer, recompute,
                activations
  inference:    batch, context (the forward's token ids: batch x context); dtype (as training:
                the predictor's --dtype, the autocast dtype); weight_dtype (the dtype the weights
                are held in: "fp32" for a model built in fp32 and run under bf16 autocast);
                autocast ("bf16" | "fp16": the forward's autocast dtype; absent without
                autocast); use_cache (false: one forward pass, no KV cache; true: a generation);
                cuda_graphs (true: the forward captured once into a CUDA graph and replayed,
                predictor/cuda_graphs.py)
  generation:   (inference with use_cache true: transformers' generate) context is the positions
                the KV cache holds at the end (prompt + new_tokens - 1: the last new token is
                never fed back); prompt (the prompt's tokens), new_tokens, cache ("dynamic" |
                "static": transformers' cache_implementation), kv_dtype (the dtype the cache's
                keys and values are held in, as the run made them; absent when they differ)
  an adapter:   (training or inference with LoRA or QLoRA through peft) lora_rank, lora_alpha,
                lora_targets (the module names peft adapted, comma-separated: "q_proj,v_proj"),
                lora_dropout (absent when 0), weight_dtype (the frozen base's dtype, for
                training too); QLoRA: quant ("nf4": the base's linears in 4 bits, by
                bitsandbytes) and double_quant (true: their absmax quantized to 8 bits)
  both:         attention ("sdpa" | "eager" | "flash": the implementation the model ran)
  a rank of a parallel job (training): tp (tensor-parallel size), sp (true: sequence
                parallelism with tp), dp (data-parallel size), zero (3: FSDP2 shards the
                parameters, gradients and optimizer states over dp; 0: DDP); the record
                describes the rank, whose log it is in; pipeline parallelism
                (predictor/pipeline.py): pp (the number of pipeline ranks), pp_schedule ("gpipe" |
                "1f1b" | "interleaved-1f1b"), pp_microbatches (per step, each of micro_batch
                sequences), pp_stages (the rank's stage indices, comma-separated: "1", "1,3");
                expert parallelism (predictor/expert_parallel.py): ep (the ranks each layer's
                experts are split over, of the dp ones); context parallelism
                (predictor/context_parallel.py): cp (the ranks each sequence is split over; dp
                then counts the batch's ranks, FSDP2 sharding over dp x cp)
"""

import json
import os

FORMAT = "fragscope.model/1"
MAX_BYTES = 4096

# The config keys the estimator reads (estimator/model_spec_json.h) and the dropout
# probabilities; kept first when a config's scalars do not all fit in a record.
_ESSENTIAL = (
    "model_type", "num_hidden_layers", "hidden_size", "num_attention_heads",
    "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size", "tie_word_embeddings",
    "attention_bias", "mlp_bias", "num_local_experts", "num_experts_per_tok", "n_layer", "n_embd",
    "n_head", "n_inner", "n_positions", "activation_function", "ffn_dim",
    "max_position_embeddings", "resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_dropout",
    "hidden_dropout", "dropout", "hidden_dropout_prob", "activation_dropout",
    # Read by the estimator's config reader (estimator/hf_config.cc) for the other decoder types.
    "num_layers", "num_heads", "d_model", "num_kv_heads", "n_head_kv", "ffn_hidden_size",
    "hidden_act", "hidden_activation", "activation", "qkv_bias", "use_qkv_bias", "use_bias",
    "bias", "enable_bias", "qk_layernorm", "use_qk_norm", "use_parallel_residual", "parallel_attn",
    "new_decoder_architecture", "multi_query", "num_ln_in_parallel_attn", "alibi", "num_experts",
    "n_routed_experts", "moe_intermediate_size", "shared_expert_intermediate_size",
    "n_shared_experts", "first_k_dense_replace", "decoder_sparse_step", "mlp_only_layers",
    "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
    "word_embed_proj_dim", "do_layer_norm_before", "_remove_final_layer_norm",
    "layer_norm_elementwise_affine", "is_encoder_decoder", "final_logit_softcapping")

_JOB_KEYS = ("mode", "seq", "micro_batch", "batch", "context", "dtype", "optimizer", "attention",
             "recompute", "activations", "weight_dtype", "autocast", "use_cache", "prompt",
             "new_tokens", "cache", "kv_dtype", "tp", "sp", "dp", "zero", "cuda_graphs", "pp",
             "pp_schedule", "pp_microbatches", "pp_stages", "ep", "cp")

# A LoRA or QLoRA job's keys (predictor/adapters.py).
_ADAPTER_KEYS = ("lora_rank", "lora_alpha", "lora_targets", "lora_dropout", "quant",
                 "double_quant")


def config_dict(model_or_config):
    """The config of an nn.Module with a Hugging Face `.config`, a config object, a dict, or a
    config.json path, as a dict."""
    if isinstance(model_or_config, (str, os.PathLike)):
        with open(model_or_config, encoding="utf-8") as f:
            return json.load(f)
    if isinstance(model_or_config, dict):
        return dict(model_or_config)
    config = getattr(model_or_config, "config", model_or_config)
    if isinstance(config, dict):
        return dict(config)
    if hasattr(config, "to_dict"):
        return config.to_dict()
    raise TypeError("record_model takes an nn.Module with a Hugging Face .config, a config "
                    f"object, a dict or a config.json path, not {type(model_or_config).__name__}")


def _scalars(config):
    return {k: v for k, v in config.items()
            if isinstance(v, (bool, int, float)) or (isinstance(v, str) and len(v) <= 64)}


def model_json(model_or_config, **job):
    """The record's JSON text. job: mode ("training"/"inference"), seq, micro_batch, batch,
    context, dtype, optimizer, attention ("sdpa"/"eager"/"flash"), recompute, activations,
    weight_dtype, autocast, use_cache, prompt, new_tokens, cache, kv_dtype, tp, sp, dp, zero
    (the module doc);
    None values are left out (the analyzer then says what it assumed)."""
    unknown = set(job) - set(_JOB_KEYS) - set(_ADAPTER_KEYS)
    if unknown:
        raise TypeError(f"record_model: unknown job keys {sorted(unknown)}; known: "
                        f"{_JOB_KEYS + _ADAPTER_KEYS}")
    config = config_dict(model_or_config)
    attention = config.get("_attn_implementation")
    if job.get("attention") is None and attention in ("sdpa", "eager"):
        job["attention"] = attention
    elif job.get("attention") is None and attention and "flash" in str(attention):
        job["attention"] = "flash"
    record = {"format": FORMAT, "config": _scalars(config),
              "job": {k: v for k, v in job.items() if v is not None}}
    text = json.dumps(record, separators=(",", ":"))
    if len(text.encode()) > MAX_BYTES:
        record["config"] = {k: v for k, v in record["config"].items() if k in _ESSENTIAL}
        text = json.dumps(record, separators=(",", ":"))
    if len(text.encode()) > MAX_BYTES:
        raise ValueError(f"record_model: the model record is {len(text.encode())} bytes, more "
                         f"than the {MAX_BYTES} a log record holds")
    return text


def shape_from_inputs(args, kwargs):
    """(micro_batch, seq) of a forward call's token ids (input_ids, or the first tensor
    argument of two dimensions), or None."""
    ids = kwargs.get("input_ids")
    if ids is None:
        ids = next((a for a in args if hasattr(a, "shape") and len(a.shape) == 2), None)
    if ids is None or len(getattr(ids, "shape", ())) != 2:
        return None
    return int(ids.shape[0]), int(ids.shape[1])
