"""torch.compile of each transformer block of a parallel rank (torchtitan's apply_compile,
hooks/python/fragscope/predictor/block_compile.py): the blocks compiled after tensor parallelism
and before fully_shard, on a CPU.

Run by ctest (tests/predict/CMakeLists.txt, predict.compile_parallel) with PYTHONPATH=hooks/python,
FRAGSCOPE_LIB_DIR and FRAGSCOPE_BIN set. Prints "skipped: ..." and exits 0 without torch (with
torch.distributed, FSDP2 and the fake process group), triton, transformers or
libfragscope_torch.so.

The model: a two-layer Llama (hidden 256, 8 heads of 32, MLP 512, vocabulary 1024, untied), two
AdamW steps at seq 64 x micro-batch 2, bf16 (FSDP2's MixedPrecisionPolicy).

  - Fsdp2Test: rank 0 of a world of 4 under FSDP2, eager and compiled per block (predict_hf):
    the compiled run completes and dynamo compiled graphs; the weights the "init / weights"
    phase allocates are the same in both and are the model's fp32 parameters / 4 (every
    dimension divides by 4: no padding) plus the rotary embedding's buffers; the compiled step's
    peak allocated differs from the eager one (both printed). With the training forward's
    KV cache (transformers' default use_cache) each block is a graph of its own (dynamo guards
    on the cache's per-layer state); the CLI's `--parallel fsdp2 --world-size 4 --compile
    --set use_cache=false` compiles one graph for both blocks, and `fragscope analyze` reads
    its log.
  - TensorParallelTest: dp 2 x tp 2 under FSDP2, rank 0, eager and compiled: the second step's
    functional collectives (DTensor's all-gathers, reduce-scatters and the loss's all-reduces,
    traced into the compiled graphs) are the same in number and bytes in both.
  - RefusalTest: --compile with --parallel ddp, --ep and --cp, and --parallel with --model-fn,
    are usage errors (exit 2) that name the combination and why; predict_hf's
    PredictionError names parallel='ddp'.
"""

import collections
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

LAYERS, HIDDEN, HEADS, HEAD_DIM, FFN, VOCAB = 2, 256, 8, 32, 512, 1024
SEQ, MICRO_BATCH, WORLD = 64, 2, 4
CONFIG = {"model_type": "llama", "num_hidden_layers": LAYERS, "hidden_size": HIDDEN,
          "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "head_dim": HEAD_DIM,
          "intermediate_size": FFN, "vocab_size": VOCAB, "max_position_embeddings": 256,
          "tie_word_embeddings": False}
# The embedding and lm_head; per layer q, k, v, o, gate, up, down and two RMSNorms; the final
# norm.
PARAMS = 2 * VOCAB * HIDDEN + LAYERS * (4 * HIDDEN * HIDDEN + 3 * HIDDEN * FFN + 2 * HIDDEN) \
    + HIDDEN
# The rotary embedding's buffers: inv_freq and original_inv_freq, fp32, head_dim / 2 each.
ROTARY = 2 * 4 * HEAD_DIM // 2


def _missing():
    from prerequisites import missing_distributed

    why = missing_distributed("torch.distributed.fsdp", "fully_shard", "FSDP2")
    if why:
        return why
    try:
        import triton  # noqa: F401
    except ImportError as e:
        return f"needs triton ({e})"
    return None


def predict(tag, **options):
    """(prediction, events) of rank 0 of CONFIG's job with `options`; events as
    recorded_events.recording's."""
    from recorded_events import recording

    from fragscope.predictor.hf_loop import predict_hf

    log = os.path.join(tempfile.mkdtemp(), f"{tag}.fslog")
    with recording() as events:
        prediction = predict_hf(CONFIG, log, seq=SEQ, micro_batch=MICRO_BATCH, steps=2,
                                optimizer="adamw", rank=0, **options)
    return prediction, events


def weights(events):
    """Bytes of each allocation the "init / weights" phase makes with the weights role, in
    order (the step's input ids, made before its first marker, are left out)."""
    from fragscope.predictor.roles import WEIGHTS

    return [e[3] for e in events
            if e[0] == "alloc" and e[1] == "init / weights" and e[4] == WEIGHTS]


def collectives(events, phase):
    """(op, allocations, bytes) of the functional collectives' outputs made in `phase`."""
    counts, sizes = collections.Counter(), collections.Counter()
    for e in events:
        if e[0] == "alloc" and e[1] == phase and e[2].startswith("_c10d_functional::"):
            counts[e[2]] += 1
            sizes[e[2]] += e[3]
    return sorted((op, counts[op], sizes[op]) for op in counts)


class Fsdp2Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        rank = {"parallel": "fsdp2", "world_size": WORLD}
        cls.eager, cls.eager_events = predict("eager", **rank)
        cls.compiled, cls.compiled_events = predict("compiled", compile=True, **rank)

    def test_dynamo_compiled_the_blocks(self):
        print(f"torch.compile per block: {self.compiled.compiled}")
        self.assertEqual(self.compiled.compiled["graphs"], LAYERS)
        self.assertEqual(self.eager.compiled, {})
        self.assertEqual(self.compiled.params, PARAMS)

    def test_weights_are_the_shards(self):
        eager, compiled = weights(self.eager_events), weights(self.compiled_events)
        self.assertEqual(compiled, eager)
        print(f"init / weights: {sum(compiled)} bytes compiled and eager, the model's fp32 "
              f"parameters {4 * PARAMS} bytes")
        self.assertEqual(sum(compiled), 4 * PARAMS // WORLD + ROTARY)

    def test_compiled_peak_differs(self):
        eager, compiled = self.eager.peak_allocated, self.compiled.peak_allocated
        print(f"peak allocated: eager FSDP2 {eager} bytes, compiled per block {compiled} bytes")
        for eager_phase, phase in zip(self.eager.phases, self.compiled.phases):
            print(f"  eager {eager_phase}\n  compiled {phase}")
        self.assertNotEqual(compiled, eager)

    def test_cli_and_analyze(self):
        log = os.path.join(tempfile.mkdtemp(), "cli.fslog")
        # Without the training forward's KV cache (transformers' use_cache), whose per-layer
        # state dynamo guards on, one graph serves every block.
        sets = [f"{key}={value}" for key, value in dict(CONFIG, use_cache=False).items()
                if key != "model_type"]
        flags = [arg for kv in sets for arg in ("--set", kv.replace("False", "false"))]
        result = subprocess.run(
            [sys.executable, "-m", "fragscope", "predict", "--config", "llama", *flags,
             "--seq", str(SEQ), "--micro-batch", str(MICRO_BATCH), "--steps", "2",
             "--parallel", "fsdp2", "--world-size", str(WORLD), "--compile", "--out", log],
            capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        self.assertIn("torch.compile: 1 graphs, 0 graph breaks", result.stdout)
        self.assertNotIn("global hooks", result.stderr)
        report = subprocess.run([os.environ["FRAGSCOPE_BIN"], "analyze", log],
                                capture_output=True, text=True)
        self.assertEqual(report.returncode, 0, report.stderr)
        self.assertIn("rank 0)", report.stdout.splitlines()[0])


class TensorParallelTest(unittest.TestCase):
    def test_collectives_as_eager(self):
        rank = {"parallel": "fsdp2", "world_size": WORLD, "tp": 2}
        eager, eager_events = predict("tp_eager", **rank)
        compiled, compiled_events = predict("tp_compiled", compile=True, **rank)
        self.assertGreaterEqual(compiled.compiled["graphs"], 1)
        print(f"dp 2 x tp 2: peak allocated eager {eager.peak_allocated}, compiled per block "
              f"{compiled.peak_allocated} bytes")
        for phase in ("step 1 / forward", "step 1 / backward"):
            expected = collectives(eager_events, phase)
            self.assertTrue(expected, phase)
            self.assertEqual(collectives(compiled_events, phase), expected, phase)


class RefusalTest(unittest.TestCase):
    def run_cli(self, *flags):
        return subprocess.run([sys.executable, "-m", "fragscope", "predict", *flags, "--seq", "8",
                               "--micro-batch", "1", "--compile", "--out",
                               os.path.join(tempfile.mkdtemp(), "bad.fslog")],
                              capture_output=True, text=True)

    def test_cli_names_the_combination(self):
        llama = ["--config", "llama"]
        for flags, words in (
                (llama + ["--parallel", "ddp", "--world-size", "2"],
                 "--compile with --parallel ddp is not predicted: DDP hands each compiled graph "
                 "to dynamo's DDPOptimizer"),
                (llama + ["--parallel", "fsdp2", "--world-size", "4", "--ep", "2"],
                 "--compile with --ep is not predicted"),
                (llama + ["--parallel", "fsdp2", "--world-size", "4", "--cp", "2"],
                 "--compile with --cp is not predicted"),
                (["--model-fn", "os:getcwd", "--step-fn", "os:getcwd", "--parallel", "fsdp2",
                  "--world-size", "2"], "--compile with --parallel goes with --config")):
            result = self.run_cli(*flags)
            self.assertEqual(result.returncode, 2, (flags, result.stderr))
            self.assertIn(words, result.stderr, flags)

    def test_api_names_the_combination(self):
        from fragscope.predictor.errors import PredictionError
        from fragscope.predictor.hf_loop import predict_hf

        with self.assertRaisesRegex(PredictionError, "compile with parallel='ddp' is not "
                                    "predicted: DDP hands"):
            predict_hf("llama", "unused.fslog", seq=8, micro_batch=1, parallel="ddp",
                       world_size=2, compile=True)
        with self.assertRaisesRegex(PredictionError, "compile with recompute is not predicted"):
            predict_hf("llama", "unused.fslog", seq=8, micro_batch=1, parallel="fsdp2",
                       world_size=2, compile=True, recompute=True)


if __name__ == "__main__":
    reason = _missing()
    if reason:
        print(f"skipped: {reason}")
        sys.exit(0)
    unittest.main(verbosity=2)
