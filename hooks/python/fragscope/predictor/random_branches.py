"""Random scalars that only choose a branch, resolved to the branch a real step takes most often.

A fake tensor has no value, so reading one as a Python number fails under FakeTensorMode
(`DataDependentOutputException: aten._local_scalar_dense`). Models draw such numbers to choose
control flow: LayerDrop (OPT, BART, Wav2Vec2, ...: `p = torch.rand([])` then
`if p < self.layerdrop: continue`) skips a layer with probability `layerdrop`. Which branch runs
decides what is allocated, so the prediction takes the likelier one and says so.

The mechanism is general, not a model's patch: a dispatch mode remembers each single-element
sample of a known distribution (`aten.rand`: uniform on [0, 1); `aten.randn`: standard normal)
and each comparison of such a sample with a Python number (`lt`, `le`, `gt`, `ge`), whose
probability of being true follows from the distribution. When a comparison is read as a Python
bool it is the value it has at the sample's median (0.5, or 0), which is the likelier outcome of
any threshold test; a sample read as a number is its median. Each read of an uncertain outcome
(a test certain either way, as LayerDrop 0, assumes nothing) is noted (`notes`), with
the module that made it (location.py); a comparison against the running module's
`layerdrop` (or its config's) is named LayerDrop. Any other data-dependent read still fails, and
the failure names its module and op.
"""

import math


class _Sample:
    def __init__(self, name, cdf, median):
        self.name = name  # "torch.rand" / "torch.randn"
        self.cdf = cdf
        self.median = median


_UNIFORM = _Sample("torch.rand", lambda c: min(max(c, 0.0), 1.0), 0.5)
_NORMAL = _Sample("torch.randn", lambda c: 0.5 * (1.0 + math.erf(c / math.sqrt(2.0))), 0.0)

_SYMBOLS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">="}


class _Comparison:
    def __init__(self, sample, op, constant):
        self.sample = sample
        self.op = op
        self.constant = constant
        below = sample.cdf(constant)  # P(sample < c); a continuous law: P(sample <= c) too
        self.probability = below if op in ("lt", "le") else 1.0 - below
        m = sample.median
        self.value = {"lt": m < constant, "le": m <= constant, "gt": m > constant,
                      "ge": m >= constant}[op]

    def text(self):
        return f"{self.sample.name}() {_SYMBOLS[self.op]} {self.constant:g}"


def _layerdrop(module):
    """The LayerDrop probability a module holds (its own, or its config's), or None."""
    if module is None:
        return None
    value = getattr(module, "layerdrop", None)
    if not isinstance(value, (int, float)):
        value = getattr(getattr(module, "config", None), "layerdrop", None)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def mode(location):
    """The dispatch mode (enter it inside the capture, after `location.watching()`); its `notes`
    list the assumptions made, one per module and test, with how often it was read."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.weak import WeakIdKeyDictionary

    aten = torch.ops.aten
    sources = {aten.rand.default: _UNIFORM, aten.rand.generator: _UNIFORM,
               aten.randn.default: _NORMAL, aten.randn.generator: _NORMAL}
    comparisons = {}
    for op in _SYMBOLS:
        packet = getattr(aten, op)
        comparisons[packet.Scalar] = op
        comparisons[packet.Tensor] = op

    class RandomBranches(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.samples = WeakIdKeyDictionary()  # tensor -> _Sample
            self.tests = WeakIdKeyDictionary()  # bool tensor -> _Comparison
            self.counts = {}  # (module text, what, assumed) -> [reads, note prefix]
            self.order = []

        @classmethod
        def ignore_compile_internals(cls):
            # torch.compile compiles under this mode (compile.py); a random scalar read inside a
            # compiled region breaks its graph, and the read runs here, eagerly.
            return True

        @property
        def notes(self):
            out = []
            for key in self.order:
                where, what, assumed = key
                count, label = self.counts[key]
                times = "once" if count == 1 else f"{count} times"
                out.append(f"{label}: {where} read {what} {times}; assumed {assumed}")
            return out

        def _note(self, label, what, assumed):
            where = location.modules_text() or "the step"
            key = (where, what, assumed)
            if key not in self.counts:
                self.counts[key] = [0, label]
                self.order.append(key)
            self.counts[key][0] += 1

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if any(hasattr(t, "__tensor_flatten__") for t in types):
                return NotImplemented  # a wrapper subclass (DTensor): its local tensors come back
            if func is aten._local_scalar_dense.default:
                return self._read(func, args)
            out = func(*args, **kwargs)
            sample = sources.get(func)
            if sample is not None and isinstance(out, torch.Tensor) and out.numel() == 1:
                self.samples[out] = sample
            op = comparisons.get(func)
            if op is not None and len(args) == 2 and isinstance(args[0], torch.Tensor):
                sample = self.samples.get(args[0])
                constant = args[1]
                if sample is not None and isinstance(constant, (int, float)) \
                        and not isinstance(constant, bool):
                    self.tests[out] = _Comparison(sample, op, float(constant))
            return out

        def _read(self, func, args):
            t = args[0]
            test = self.tests.get(t)
            if test is not None and 0.0 < test.probability < 1.0:
                layerdrop = _layerdrop(location.innermost())
                label = "LayerDrop" if layerdrop is not None and math.isclose(
                    layerdrop, test.constant) else "random branch"
                what = f"{test.text()} (true with probability {test.probability:.3g})"
                self._note(label, what, f"{str(test.value).lower()}, the likelier branch")
                return test.value
            if test is not None:
                return test.value  # a certain outcome (LayerDrop 0): nothing assumed
            sample = self.samples.get(t)
            if sample is not None:
                self._note("random scalar", f"{sample.name}() as a number",
                           f"{sample.median:g}, its median")
                return sample.median if t.is_floating_point() else int(sample.median)
            return func(*args)

    return RandomBranches()
