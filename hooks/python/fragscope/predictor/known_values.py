"""Values a fake tensor has by construction, kept beside it so that reading one answers as the GPU.

A fake tensor has no data, so reading one as a Python number (`bool(t)`, `t.item()`) fails with
`DataDependentOutputException: aten._local_scalar_dense`. Many such reads do not depend on the
model's weights at all, only on how the tensor was made: an attention mask of ones cat'ed with a
column of ones each step, a stopping criterion's `torch.full(batch, cur_len >= max_length)`, an
`eos_token_id` made with `torch.tensor(2)`. transformers' `generate` decides its control flow
(stop or go on, skip the causal mask or build it) from such reads.

`KnownValues` is a dispatch mode that computes, on the CPU, the value of every fake tensor made
from known values only: factory ops (`ones`, `zeros`, `full`, `arange`, `scalar_tensor`, a
constant lifted from a real tensor), then any deterministic op all of whose tensor inputs are
known (their values run through the same ATen op on CPU tensors, device arguments turned into
the CPU). A read of a known tensor is answered from its value; any other read still fails (the
failure names its module and op: location.py). `assume(tensor, value)` gives a tensor
whose value depends on data the prediction does not have (a token id compared with the EOS
token) the value a caller assumes, which the caller must say.

Kept sound without tracking aliases one by one: a value holds the tensor's version counter at
the time it was computed, and any in-place op on the tensor or on a view of it (views share the
counter) bumps the counter and so retires the value; in-place and `out=` ops make no value.
Ops whose outputs are undefined (`empty`), random (the `nondeterministic_seeded` ones: rand,
randint, multinomial) or larger than `limit` elements make none either, so the static KV cache
and the logits are never copied to the CPU.
"""

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._mode_utils import no_dispatch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_unflatten
from torch.utils.weak import WeakIdKeyDictionary

aten = torch.ops.aten

# Largest output (elements) whose value is kept: attention masks and token-count vectors are far
# below it; caches, activations and logits of a real model are above it or never known anyway.
DEFAULT_LIMIT = 1 << 22

# Factories whose outputs hold whatever memory held: no value.
_UNDEFINED = ("empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided",
              "empty_permuted")

_CPU = torch.device("cpu")


def _is_fake(t):
    return isinstance(t, FakeTensor)


class KnownValues(TorchDispatchMode):
    """Enter inside the capture (above its fake mode): fake tensors made from known values carry
    their values, and `_local_scalar_dense` of one is answered from it."""

    def __init__(self, limit=DEFAULT_LIMIT):
        super().__init__()
        self.limit = limit
        self.values = WeakIdKeyDictionary()  # fake tensor -> (CPU tensor, its version then)

    def value(self, t):
        """The CPU value of `t` (a real CPU tensor is its own), or None if it is not known."""
        if not isinstance(t, torch.Tensor):
            return None
        if not _is_fake(t):
            return t if t.device.type == "cpu" and not t.is_meta else None
        entry = self.values.get(t)
        if entry is None or entry[1] != t._version:
            return None
        return entry[0]

    def assume(self, t, value):
        """From now on `t` (a fake tensor) holds `value` (a Python number for every element, or
        a CPU tensor of its shape): the caller's assumption, which the caller must say."""
        with no_dispatch():  # real CPU tensors, under the capture's fake mode
            if isinstance(value, torch.Tensor):
                known = value.to(_CPU, t.dtype).expand(t.shape).clone()
            else:
                known = torch.full(tuple(t.shape), value, dtype=t.dtype)
        self.values[t] = (known, t._version)

    @classmethod
    def ignore_compile_internals(cls):
        # torch.compile runs with this mode on (dynamo skips a frame under any other mode): a
        # static cache's decode steps, which transformers compiles on a GPU (generate.py).
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if any(hasattr(t, "__tensor_flatten__") for t in types):
            return NotImplemented  # a wrapper subclass (DTensor): its local tensors come back
        if func is aten._local_scalar_dense.default:
            known = self.value(args[0])
            if known is not None:
                with no_dispatch():
                    return known.item()
            return func(*args, **kwargs)
        out = func(*args, **kwargs)
        if self._may_know(func, out):
            self._compute(func, args, kwargs, out)
        return out

    def _may_know(self, func, out):
        schema = func._schema
        if schema.is_mutable or torch.Tag.nondeterministic_seeded in func.tags:
            return False
        if func.overloadpacket.__name__ in _UNDEFINED:
            return False
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        return bool(outputs) and all(_is_fake(t) and t.numel() <= self.limit for t in outputs)

    def _compute(self, func, args, kwargs, out):
        flat, spec = tree_flatten((args, kwargs))
        values = []
        for a in flat:
            if isinstance(a, torch.Tensor):
                known = self.value(a)
                if known is None:
                    return  # an input without a value: the output has none
                values.append(known)
            elif isinstance(a, torch.device):
                values.append(_CPU)
            else:
                values.append(a)
        cpu_args, cpu_kwargs = tree_unflatten(values, spec)
        if "device" in cpu_kwargs:
            cpu_kwargs["device"] = _CPU
        if cpu_kwargs.get("pin_memory"):
            cpu_kwargs["pin_memory"] = False
        try:
            with no_dispatch():
                result = func(*cpu_args, **cpu_kwargs)
        except Exception:
            return  # an op the CPU does not run as the GPU: no value, a read of it fails
        outputs = tree_flatten(out)[0]
        results = tree_flatten(result)[0]
        if len(outputs) != len(results):
            return
        for t, v in zip(outputs, results):
            if isinstance(t, torch.Tensor) and isinstance(v, torch.Tensor) \
                    and tuple(v.shape) == tuple(t.shape) and v.dtype == t.dtype:
                self.values[t] = (v, t._version)

