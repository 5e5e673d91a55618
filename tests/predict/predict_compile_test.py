"""torch.compile in a prediction (predictor/compile.py): inductor's generated wrapper runs on fake
tensors, its buffers allocated and freed from fragscope's allocator in the wrapper's order.

Run by ctest (tests/predict/CMakeLists.txt, predict.compile) with PYTHONPATH=hooks/python,
FRAGSCOPE_LIB_DIR and FRAGSCOPE_BIN set. Prints "skipped: ..." and exits 0 without torch,
transformers or libfragscope_torch.so.

  - WrapperTest: a compiled block (Linear, LayerNorm, GELU, residual, Linear), its forward and
    backward wrappers captured with run_and_get_code: the allocations and frees the prediction
    records while each runs are exactly those the wrapper names, in its order -- each
    `bufN = empty_strided_cuda(size, stride, dtype)` one allocation of its bytes, each
    `del bufN` of a buffer it allocated (through its reuse lines, `bufM = bufN; del bufN  #
    reuse`) the free of that block, in the second call (the first's kernel launches time their
    configs); inference (no_grad) likewise.
  - PeakTest: a one-layer GPT-2, training with AdamW and inference, eager against compiled:
    the second step's peak allocated bytes is lower compiled (inductor's fusion keeps fewer saved
    activations and temporaries); the figures are printed.
  - OnDemandTest: fragscope.predict with torch.compile called in make_model, and with a function
    compiled before the prediction began (compile=True): the same allocations, not eager's.
  - RefusalTest: the combinations not predicted name themselves (CLI exit 2, PredictionError).
"""

import os
import re
import subprocess
import sys
import tempfile
import unittest
import unittest.mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from prerequisites import missing as _missing  # noqa: E402

GPT2 = {"n_layer": 1, "n_embd": 64, "n_head": 2, "vocab_size": 512, "n_positions": 64}

_ALLOC = re.compile(r"^\s*(\w+) = empty_strided_cuda\(\(([^)]*)\), \(([^)]*)\), torch\.(\w+)\)")
_REUSE = re.compile(r"^\s*(\w+) = (\w+); del (\w+)  # reuse")
_DEL = re.compile(r"^\s*del (\w+(?:, \w+)*)\s*$")


def _nbytes(size, stride, dtype):
    import torch

    sizes = [int(s) for s in size.split(",") if s.strip()]
    strides = [int(s) for s in stride.split(",") if s.strip()]
    if any(s == 0 for s in sizes):
        return 0
    span = sum((s - 1) * st for s, st in zip(sizes, strides)) + 1
    return span * getattr(torch, dtype).itemsize


def wrapper_events(code):
    """The allocations and frees `code` (an inductor wrapper) names in its call(), in order:
    ("alloc", bytes) and ("free", index of the allocation)."""
    body = code[code.index("def call("):]
    blocks, events = {}, []  # buffer name -> index of its allocation
    for line in body.splitlines():
        m = _ALLOC.match(line)
        if m:
            blocks[m.group(1)] = len([e for e in events if e[0] == "alloc"])
            events.append(("alloc", _nbytes(m.group(2), m.group(3), m.group(4))))
            continue
        m = _REUSE.match(line)
        if m:
            if m.group(2) in blocks:
                blocks[m.group(1)] = blocks.pop(m.group(2))
            continue
        m = _DEL.match(line)
        if m:
            for name in m.group(1).split(", "):
                if name in blocks:
                    events.append(("free", blocks.pop(name)))
    return events


def journal_events(journal, start, end):
    """The journal's allocations and frees between markers `start` and `end`, as wrapper_events
    numbers them (frees of blocks allocated before `start` left out)."""
    entries = journal[journal.index(("mark", start)) + 1:journal.index(("mark", end))]
    index, events = {}, []
    for entry in entries:
        if entry[0] == "alloc":
            index[entry[1]] = len(index)
            events.append(("alloc", entry[2]))
        elif entry[0] == "free" and entry[1] in index:
            events.append(("free", index.pop(entry[1])))
    return events


class WrapperTest(unittest.TestCase):
    def _block(self):
        import torch

        return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.LayerNorm(256),
                                   torch.nn.GELU(), torch.nn.Linear(256, 64)).cuda()

    def test_training_wrappers_allocate_what_they_name(self):
        import torch
        from torch._inductor.utils import run_and_get_code

        from fragscope.predictor.capture import capture

        journal = []
        with capture(os.path.join(tempfile.mkdtemp(), "w.fslog"), journal=journal) as (_, mark):
            block = self._block()
            x = torch.randn(32, 64, device="cuda", requires_grad=True)
            grad = torch.randn(32, 64, device="cuda")
            block(x).backward(grad)  # eager: the cuBLAS workspaces of both threads made
            x.grad = None
            for p in block.parameters():
                p.grad = None
            model = torch.compile(block)

            def step(name):
                mark(f"{name} forward")
                out = model(x)
                mark(f"{name} backward")
                out.backward(grad)
                mark(f"{name} end")

            # The first call compiles, and its kernels' first launches time their launch
            # configs (autotune.py); what the second records is its wrappers' alone.
            _, codes = run_and_get_code(step, "first")
            x.grad = None
            for p in block.parameters():
                p.grad = None
            step("second")
        self.assertEqual(len(codes), 2, "a forward and a backward wrapper")
        forward, backward = (wrapper_events(c) for c in codes)
        self.assertTrue(any(e[0] == "free" for e in backward), "the backward frees buffers")
        self.assertEqual(journal_events(journal, "second forward", "second backward"), forward)
        self.assertEqual(journal_events(journal, "second backward", "second end"), backward)

    def test_inference_wrapper_allocates_what_it_names(self):
        import torch
        from torch._inductor.utils import run_and_get_code

        from fragscope.predictor.capture import capture

        journal = []
        with capture(os.path.join(tempfile.mkdtemp(), "i.fslog"), journal=journal) as (_, mark):
            model = self._block().eval()
            x = torch.randn(32, 64, device="cuda")
            with torch.no_grad():
                model(x)  # the cuBLAS workspace, outside the measured call
                compiled = torch.compile(model)
                out, codes = run_and_get_code(lambda: compiled(x))  # compiles, autotunes
                del out
                mark("second")
                out = compiled(x)
                mark("end")
        self.assertEqual(len(codes), 1)
        expected = wrapper_events(codes[0])
        self.assertGreaterEqual(len(expected), 3)
        self.assertEqual(journal_events(journal, "second", "end"), expected)


def _mlp():
    import torch

    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(),
                               torch.nn.Linear(256, 64)).cuda()


def _train_step(model, index):
    import torch

    x = torch.randn(32, 64, device="cuda")
    model(x).sum().backward()


def _forward(model, x):
    return model(x)


class OnDemandTest(unittest.TestCase):
    """fragscope.predict: a module torch.compile'd in make_model (compile support from that
    call), and a function compiled before the prediction began (compile=True), predict the same
    compiled steps; eager differs (the GELU fused: its input saved, not its output as well)."""

    def _predict(self, make, step, compile=False):
        import fragscope
        from fragscope.predictor.capture import capture

        journal = []
        log = os.path.join(tempfile.mkdtemp(), "p.fslog")
        with unittest.mock.patch("fragscope.predictor.capture.capture",
                                 _journaling(capture, journal)):
            fragscope.predict(make, step, log, steps=2, compile=compile)
        return [e[2] for e in journal if e[0] == "alloc"]

    def test_compiled_inside_and_before_agree(self):
        import torch

        inside = self._predict(lambda: torch.compile(_mlp()), _train_step)
        forward = torch.compile(_forward)  # outside any prediction

        def step(model, index):
            x = torch.randn(32, 64, device="cuda")
            forward(model, x).sum().backward()

        ahead = self._predict(_mlp, step, compile=True)
        eager = self._predict(_mlp, _train_step)
        self.assertEqual(inside, ahead)
        self.assertNotEqual(inside, eager)


def _journaling(capture, journal):
    def journaled(*args, **kwargs):
        kwargs["journal"] = journal
        return capture(*args, **kwargs)

    return journaled


class PeakTest(unittest.TestCase):
    def _peaks(self, mode):
        from fragscope.predictor.hf_loop import predict_hf

        out = {}
        for compiled in (False, True):
            p = predict_hf("gpt2", os.path.join(tempfile.mkdtemp(), f"{mode}.fslog"), seq=64,
                           micro_batch=4, mode=mode, overrides=GPT2, compile=compiled, steps=2)
            # Step 1's: step 0's first kernel launches time their configs (autotune.py).
            out[compiled] = max(ph.peak_allocated for ph in p.phases
                                if ph.marker.startswith("step 1 /"))
            # Dynamo's summary: graphs compiled only with compile (none compiled eagerly).
            self.assertEqual(bool(p.compiled) and p.compiled["graphs"] >= 1, compiled)
        print(f"\n  gpt2 1 layer {mode}, step 1: eager peak {out[False]} B, "
              f"compiled {out[True]} B", file=sys.stderr)
        return out

    def test_training_compiled_holds_less(self):
        peaks = self._peaks("training")
        self.assertLess(peaks[True], peaks[False])

    def test_inference_compiled_holds_no_more(self):
        peaks = self._peaks("inference")
        self.assertLessEqual(peaks[True], peaks[False])


class RefusalTest(unittest.TestCase):
    def _cli(self, *args):
        return subprocess.run([sys.executable, "-m", "fragscope", "predict", "--config", "gpt2",
                               "--seq", "8", "--micro-batch", "1", "--out",
                               os.path.join(tempfile.mkdtemp(), "r.fslog"), *args],
                              capture_output=True, text=True)

    def test_cli_names_the_combination(self):
        cases = [(["--compile", "--cuda-graphs", "--mode", "inference"],
                  "--compile with --cuda-graphs is not predicted"),
                 (["--compile", "--compile-mode", "max-autotune"],
                  "--compile-mode 'max-autotune' is not predicted"),
                 (["--compile", "--generate", "4"], "--compile with --generate is not predicted"),
                 (["--compile", "--pp", "2"], "--compile with --pp is not predicted"),
                 (["--compile-mode", "default"], "--compile-mode goes with --compile")]
        for args, message in cases:
            with self.subTest(args=args):
                result = self._cli(*args)
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertIn(message, result.stderr)

    def test_api_names_the_combination(self):
        from fragscope.predictor.errors import PredictionError
        from fragscope.predictor.hf_loop import predict_hf

        with self.assertRaisesRegex(PredictionError, "compile with recompute is not predicted"):
            predict_hf("gpt2", "unused.fslog", seq=8, micro_batch=1, compile=True, recompute=True)
        with self.assertRaisesRegex(PredictionError, "compile with lora is not predicted"):
            predict_hf("gpt2", "unused.fslog", seq=8, micro_batch=1, compile=True, lora=True)
        with self.assertRaisesRegex(PredictionError, "compile mode 'max-autotune'"):
            predict_hf("gpt2", "unused.fslog", seq=8, micro_batch=1, compile=True,
                       compile_mode="max-autotune")


if __name__ == "__main__":
    reason = _missing()
    if reason:
        print(f"skipped: {reason}")
        sys.exit(0)
    unittest.main(verbosity=2)
