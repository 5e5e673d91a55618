"""torch.compile mode="reduce-overhead" in a prediction (predictor/graph_trees.py): inductor's CUDA
graph trees run on fake tensors, their warm-ups and recordings allocating into the tree's private
pool, their replays allocating nothing.

Run by ctest (tests/predict/CMakeLists.txt, predict.graph_trees) with PYTHONPATH=hooks/python,
FRAGSCOPE_LIB_DIR and FRAGSCOPE_BIN set. Prints "skipped: ..." and exits 0 without torch,
transformers or libfragscope_torch.so.

  - BlockTest: a compiled block (Linear, LayerNorm, GELU, Linear) trained four steps, and run
    four times under no_grad: the first call warms up, the second records, the rest replay. What
    the warm-up and the recording allocate is in the tree's pool (0, 1), apart from the default
    generator's graph-safe seed and offset (8 bytes each, made when the tree's own empty graph
    registers); the replays allocate nothing and hand out the recorded output's address; the
    cuBLAS workspace a capture took is freed after it (clear_cublas_manager); reserved memory no
    longer grows after the recording.
  - HfTest: the standard loop's GPT-2 (two layers; a graph break splits it into two graphs)
    compiled with mode="reduce-overhead" through `python -m fragscope predict --compile
    --compile-mode reduce-overhead`, training and inference: steps 0 and 1 allocate, step 2's
    forward allocates nothing (the replays), and the pool's blocks are the prediction's.
  - RecordedTreeTest: scripts/gpu/pools_oracle.py's compile_ro job (a compiled MLP called five
    times under no_grad), recorded on an H100 (tests/data/oracle/pools/compile_ro.pickle): from
    the tree's first allocation on, every alloc, free and segment event in the same order with
    the same requested bytes, stream and pool -- the default generator's graph-safe state; the
    warm-up in pool (0, 1) with the first launch's autotuning of the fused GELU kernel (its first
    config's argument copied to the host, then a 50 MiB L2 flush buffer, and its second config's
    105 calls each with a clone of the argument it writes); the recording, the cuBLAS and cuBLASLt
    workspaces freed after each; the replays allocating nothing.
  - RefusalTest: a new input shape after the tree has replayed (a recording that needs the
    allocator's pool restored to a checkpoint) is a PredictionError naming setCheckpointPoolState;
    max-autotune is still refused by name.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from prerequisites import missing as _missing  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPT2 = ["--config", "gpt2", "--set", "n_layer=2", "--set", "n_embd=128", "--set", "n_head=2",
        "--set", "vocab_size=512", "--seq", "64", "--micro-batch", "4", "--steps", "3"]
TREE_POOL = (0, 1)  # the graph tree's pool: the prediction's first graph_pool_handle()
GRAPH_SAFE_RNG = [8, 8]  # the default generator's seed and offset, in the default pool


def _log(name):
    return os.path.join(tempfile.mkdtemp(), f"{name}.fslog")


class BlockTest(unittest.TestCase):
    def _run(self, training):
        import torch

        from fragscope.predictor.capture import capture

        log, journal, addresses = _log("block"), [], []
        with capture(log, journal=journal, compile=True) as (prediction, mark):
            block = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.LayerNorm(256),
                                        torch.nn.GELU(), torch.nn.Linear(256, 64)).cuda()
            x = torch.randn(32, 64, device="cuda", requires_grad=training)
            grad = torch.randn(32, 64, device="cuda")
            model = torch.compile(block, mode="reduce-overhead")
            for step in range(4):
                mark(f"step {step}")
                with torch.set_grad_enabled(training):
                    out = model(x)
                    addresses.append(out.data_ptr())
                    if training:
                        out.backward(grad)
                del out
            mark("end")
        return log, journal, prediction, addresses

    def _check(self, training):
        from predict_cuda_graphs_test import events

        log, journal, prediction, addresses = self._run(training)
        allocs = [e for e in events(log) if e.kind == "alloc"]
        warm_and_record = [e for e in allocs if e.phase in ("step 0", "step 1")]
        self.assertTrue(warm_and_record)
        self.assertEqual([e.requested for e in warm_and_record if e.pool != TREE_POOL],
                         GRAPH_SAFE_RNG)
        self.assertEqual([e for e in allocs if e.phase in ("step 2", "step 3", "end")], [])
        # The replays hand out the recorded output's address.
        self.assertEqual(addresses[1], addresses[2])
        self.assertEqual(addresses[2], addresses[3])
        # The capture's cuBLAS workspace (32 MiB on an H100) is freed after the recording.
        workspace = [e for e in warm_and_record if e.requested == 32 << 20]
        self.assertTrue(workspace, "a GEMM in the capture takes a workspace in the pool")
        freed = {e.ptr for e in events(log) if e.kind == "free_requested"}
        self.assertTrue(all(e.ptr in freed for e in workspace))
        phases = {p.marker: p for p in prediction.phases}
        self.assertEqual(phases["step 2"].allocations, 0)
        self.assertEqual(phases["step 3"].peak_reserved, phases["step 1"].peak_reserved)

    def test_training(self):
        self._check(True)

    def test_inference(self):
        self._check(False)


class HfTest(unittest.TestCase):
    def _predict(self, mode):
        log = _log(mode)
        result = subprocess.run(
            [sys.executable, "-m", "fragscope", "predict", *GPT2, "--mode", mode, "--compile",
             "--compile-mode", "reduce-overhead", "--json", "--out", log],
            capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stderr)
        return log, json.loads(result.stdout)

    def _phase_allocations(self, log):
        from predict_cuda_graphs_test import events

        counts = {}
        for e in events(log):
            if e.kind == "alloc":
                counts.setdefault(e.phase, []).append(e)
        return counts

    def test_training(self):
        log, summary = self._predict("training")
        self.assertGreaterEqual(summary["compiled"]["graphs"], 1)
        allocs = self._phase_allocations(log)
        self.assertTrue(allocs.get("step 1 / forward"), "the recording allocates")
        self.assertNotIn("step 2 / forward", allocs, "the replay allocates nothing")
        self.assertTrue(any(e.pool == TREE_POOL for e in allocs["step 0 / forward"]))

    def test_inference(self):
        log, _ = self._predict("inference")
        allocs = self._phase_allocations(log)
        self.assertTrue(allocs.get("step 1 / forward"))
        self.assertNotIn("step 2 / forward", allocs)


def compile_ro(torch):
    """pools_oracle.compile_ro as it can run on fake tensors: `.sum()` without `.item()` (a copy to
    the host, nothing allocated on the device)."""
    sys.path.insert(0, os.path.join(ROOT, "scripts", "gpu"))
    try:
        import pools_oracle
    finally:
        sys.path.pop(0)
    model = pools_oracle.mlp(torch, 512)
    fn = torch.compile(model, mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn(32, 512, device="cuda")
            fn(x).sum()
    del fn, model


class RecordedTreeTest(unittest.TestCase):
    def test_every_event_as_recorded_on_an_h100(self):
        import torch

        from fragscope.predictor.capture import capture
        from predict_cuda_graphs_test import sequence

        observed_log = _log("observed")
        subprocess.run([os.environ["FRAGSCOPE_BIN"], "convert",
                        os.path.join(ROOT, "tests", "data", "oracle", "pools", "compile_ro.pickle"),
                        observed_log], check=True, capture_output=True)
        predicted_log = _log("predicted")
        with capture(predicted_log, gpu="h100-80gb", compile=True):
            compile_ro(torch)

        def from_tree(seq):  # compilation's own device work before it is not modeled
            return seq[next(i for i, e in enumerate(seq) if e[2] != 0):]

        observed = from_tree(sequence(observed_log))
        predicted = from_tree(sequence(predicted_log))
        self.assertEqual(len(observed), 263)
        self.assertEqual(predicted[:len(observed)], observed)
        # At the prediction's end dynamo's reset deletes the tree's graphs, which frees the
        # generator's graph-safe state; the H100's snapshot was taken before.
        self.assertEqual(predicted[len(observed):], [("free_requested", 8, 1, (0, 0))] * 2)


class RefusalTest(unittest.TestCase):
    def test_new_shape_after_replays(self):
        import torch

        from fragscope.predictor.capture import capture
        from fragscope.predictor.errors import PredictionError

        with self.assertRaisesRegex(PredictionError, "setCheckpointPoolState"):
            with capture(_log("shape"), compile=True):
                block = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU()).cuda()
                model = torch.compile(block, mode="reduce-overhead")
                with torch.no_grad():
                    for rows in (32, 32, 32, 16):
                        model(torch.randn(rows, 64, device="cuda"))

    def test_max_autotune_named(self):
        result = subprocess.run(
            [sys.executable, "-m", "fragscope", "predict", "--config", "gpt2", "--seq", "8",
             "--micro-batch", "1", "--compile", "--compile-mode", "max-autotune", "--out",
             _log("autotune")], capture_output=True, text=True)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("--compile-mode 'max-autotune' is not predicted", result.stderr)


if __name__ == "__main__":
    reason = _missing()
    if reason:
        print(f"skipped: {reason}")
        sys.exit(0)
    unittest.main(verbosity=2)
