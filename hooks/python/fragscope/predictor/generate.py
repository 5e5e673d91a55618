"""transformers' `generate` predicted: the prefill of a batch of prompts, then one decode step per
new token, with the KV cache (dynamic or static) that transformers builds, grows and frees.

The real `generate` of transformers 5.17 runs, its every op recorded as any forward's; only what
reads data the prediction does not have is answered or patched, each for a stated reason:

  1. Values known by construction (known_values.py). A fake tensor made from shapes and
     constants alone (an attention mask of ones, `torch.full(batch, cur_len >= max_length)`,
     `torch.tensor(eos_token_id)`) carries its value on the CPU, and a read of it is answered
     from it. That covers the special tokens' checks (`_prepare_special_tokens`: is the EOS token
     the pad token, is it negative), the right-padding check on the attention mask, the stop
     check `bool(unfinished_sequences.max() == 0)` (from the step count: the max-length
     criterion) and the masks' reads in masking_utils (below).
  2. Stopping criteria that read token values (`EosTokenCriteria`, `StopStringCriteria`) run, so
     that their ops allocate as on the GPU, and their answer is assumed all false: the generated
     token ids are fake (argmax, or multinomial, of fake logits), so no sequence is taken to end
     early. Every sequence runs to `max_new_tokens`, the longest generation, which is the worst
     case for memory: the KV cache ends holding all of it. Said in the prediction's notes.
  3. masking_utils counts a fake tensor as tracing (`is_tracing(padding_mask)`, meant for
     torch.compile and torch.export, which must not read a mask), and would then always build a
     4-D mask. An eager `generate` on a GPU is not tracing: it reads the 2-D padding mask and,
     with no padding, skips the mask and calls SDPA with `is_causal` (the flash kernel), except
     in a static cache's decode steps, whose unfilled positions are masked. Inside masking_utils
     a fake tensor alone is not tracing (torch.compile, jit and stream capture still are); the
     reads that follow are answered by (1).
  4. The prompts come with their attention mask, all ones (every prompt is `seq` tokens, no
     padding), as a tokenizer's output gives it; `generate` then infers no mask from pad tokens.
  5. A static cache: transformers torch.compiles the decode forward as on a GPU (its
     auto-compile: CompileConfig's "reduce-overhead" mode, CUDA graph trees and their private
     pool; graph_trees.py): the first decode step warms the tree up, the second records, the
     rest replay. KnownValues lets dynamo compile under it (ignore_compile_internals).

Greedy decoding (`do_sample=False`; sampling's softmax over the vocabulary is not run), with the
last position's logits only (transformers' `logits_to_keep=1`), over the generation config
transformers derives from the model's config (its EOS token, hence patch 2).

What the cache holds (transformers 5.17, `cache_utils`): a DynamicLayer concatenates each step's
keys and values onto its own (`torch.cat`: a new tensor of the longer length, the old one freed
when the layer drops it), so one layer's K or V of the previous length is the transient extra at
each step. A StaticLayer allocates K and V of `max_length - 1` positions at its first update
(lazily, in the prefill's forward) and writes into them in place. Either way the last generated
token is never fed back: the cache ends holding `prompt + new_tokens - 1` positions.

Markers: "step N / prefill" before `generate` (its setup and the prefill's forward), "step N /
decode K" as the K-th decode step prepares its inputs (K = 1 .. new_tokens - 1), and "step N /
generated" after it returns, while its output (the sequences and the cache, asked for with
`return_dict_in_generate`) is held; the output is dropped after that marker.
"""

import contextlib

CACHES = ("dynamic", "static")

# Stopping criteria whose answer depends on the generated tokens' values (patch 2).
_TOKEN_CRITERIA = ("EosTokenCriteria", "StopStringCriteria")


class Generated:
    """What one `generate` left in its cache: its class, the keys' and values' dtypes, the most
    positions a layer holds (a sliding-window layer holds fewer), and the bytes of the cache's
    CUDA tensors (each storage once). A model without a layered cache (Mamba's cache_params)
    gives its class and no layers."""

    def __init__(self, cache):
        import torch

        layers = list(getattr(cache, "layers", None) or [])
        self.cache = type(cache).__name__ if cache is not None else None
        self.layers = len(layers)
        tensors = [t for layer in layers for t in vars(layer).values()
                   if isinstance(t, torch.Tensor) and t.device.type == "cuda"]
        keys = [layer.keys for layer in layers
                if isinstance(getattr(layer, "keys", None), torch.Tensor)]
        values = [layer.values for layer in layers
                  if isinstance(getattr(layer, "values", None), torch.Tensor)]
        self.key_dtypes = sorted({_dtype_name(t.dtype) for t in keys})
        self.value_dtypes = sorted({_dtype_name(t.dtype) for t in values})
        self.positions = max((t.shape[-2] for t in keys if t.dim() >= 2), default=0)
        storages = {t.untyped_storage()._cdata: t.untyped_storage().nbytes() for t in tensors}
        self.bytes = sum(storages.values())

    def kv_dtype(self):
        """The one dtype of every key and value, or None when they differ."""
        dtypes = set(self.key_dtypes) | set(self.value_dtypes)
        return dtypes.pop() if len(dtypes) == 1 else None

    def as_dict(self):
        return {"cache": self.cache, "layers": self.layers, "positions": self.positions,
                "key_dtypes": self.key_dtypes, "value_dtypes": self.value_dtypes,
                "bytes": self.bytes}


def _dtype_name(dtype):
    name = str(dtype).replace("torch.", "")
    return {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(name, name)


@contextlib.contextmanager
def patched(known, notes):
    """Patches 2 and 3 of the module doc while a prediction generates; `known` is the
    KnownValues mode in force, `notes` a list that gets one line per stopping criterion assumed."""
    from transformers import masking_utils
    from transformers.generation import stopping_criteria

    restore = []

    def patch(owner, name, value):
        restore.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    is_tracing = masking_utils.is_tracing

    def tracing_but_not_fake(tensor=None):
        from torch._subclasses.fake_tensor import FakeTensor

        return is_tracing(None if isinstance(tensor, FakeTensor) else tensor)

    patch(masking_utils, "is_tracing", tracing_but_not_fake)
    for name in _TOKEN_CRITERIA:
        cls = getattr(stopping_criteria, name, None)
        if cls is not None:
            patch(cls, "__call__", _never_stops(cls.__call__, name, known, notes))
    try:
        yield
    finally:
        for owner, name, value in reversed(restore):
            setattr(owner, name, value)


def _never_stops(call, name, known, notes):
    note = (f"stopping: {name} read the generated tokens, which are fake; assumed that no "
            "sequence stops early (every one runs to max_new_tokens: the worst case for memory)")

    def never_stops(self, input_ids, scores, **kwargs):
        is_done = call(self, input_ids, scores, **kwargs)
        known.assume(is_done, False)
        if note not in notes:
            notes.append(note)
        return is_done

    return never_stops


@contextlib.contextmanager
def _marking_steps(model, step, marked):
    """Marks "step N / decode K" as `generate` prepares the inputs of its K-th decode step (the
    first call prepares the prefill's, already marked)."""
    calls = [0]
    prepare = model.prepare_inputs_for_generation

    def marking(*args, **kwargs):
        if calls[0]:
            marked(f"step {step} / decode {calls[0]}")
        calls[0] += 1
        return prepare(*args, **kwargs)

    model.prepare_inputs_for_generation = marking
    try:
        yield
    finally:
        del model.prepare_inputs_for_generation


def generate(model, *, step, prompt, batch, new_tokens, cache, vocab_size, marked, notes):
    """One `generate` call of `new_tokens` tokens after random prompts of batch x prompt token ids
    (inside the capture, under the caller's autocast and no_grad); `notes` gets what was assumed.
    Returns a Generated that describes the cache it held at its end."""
    import torch

    from .known_values import KnownValues

    if cache not in CACHES:
        raise ValueError(f"cache must be one of {', '.join(CACHES)}, not {cache!r}")
    marked(f"step {step} / prefill")
    with KnownValues() as known, patched(known, notes), _marking_steps(model, step, marked):
        ids = torch.randint(0, vocab_size, (batch, prompt), device="cuda")
        mask = torch.ones(batch, prompt, dtype=torch.long, device="cuda")
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens,
                             do_sample=False, cache_implementation=cache,
                             return_dict_in_generate=True)
        del ids, mask
    marked(f"step {step} / generated")
    generated = Generated(out.past_key_values)
    del out
    return generated
