"""The attention implementation a predicted Hugging Face model runs, chosen as transformers 5.17
chooses it.

"auto" (the default) passes no attn_implementation, so transformers decides:
`PreTrainedModel.get_correct_attn_implementation` takes SDPA when the model class supports it
(`_supports_sdpa`) and falls back to eager otherwise (GPT-J, GPT-Neo, BLOOM, Mamba, gpt-oss).
The implementation used is read back from the built model's config (`_attn_implementation`),
never guessed. An explicit "sdpa" on a model without SDPA keeps transformers' refusal, worded for
the predictor (the model type, and the flags that work).
"""

from .errors import PredictionError

CHOICES = ("auto", "sdpa", "eager")


def requested(attention):
    """attn_implementation for from_config: None for "auto" (transformers' own choice)."""
    if attention not in CHOICES:
        raise PredictionError(f"attention must be one of {', '.join(CHOICES)}, not {attention!r}")
    return None if attention == "auto" else attention


def model_class(cfg):
    """The causal-LM class AutoModelForCausalLM builds for `cfg`, or None if it has none."""
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM._model_mapping[type(cfg)]
    except (KeyError, ValueError):
        return None


def check_supported(cfg, attention):
    """Raises PredictionError when `attention` is "sdpa" and the model class has no SDPA path
    (its `_supports_sdpa` is False), naming the model type and the choices that work."""
    if attention != "sdpa":
        return
    cls = model_class(cfg)
    if cls is None or getattr(cls, "_supports_sdpa", None) is not False:
        return  # a property evaluated per instance, or no class: transformers decides
    raise PredictionError(
        f"{cfg.model_type} ({cls.__name__}) has no SDPA attention in transformers: use "
        "--attention eager, or --attention auto (the default), which takes eager for it as "
        "transformers does")


def used(model):
    """The implementation the built model runs ("sdpa", "eager", ...), from its config."""
    config = getattr(model, "config", None)
    value = getattr(config, "_attn_implementation", None)
    if not value:
        raise PredictionError(f"{type(model).__name__}: its config names no attention "
                              "implementation")
    return value
