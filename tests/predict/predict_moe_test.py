"""fragscope.predict of a mixture-of-experts model (transformers' Mixtral) on a CPU.

Run by ctest (tests/predict/CMakeLists.txt, predict.moe) with PYTHONPATH=hooks/python,
FRAGSCOPE_LIB_DIR and FRAGSCOPE_BIN set. Prints "skipped: ..." and exits 0 without torch,
transformers or libfragscope_torch.so.

  - MixtralTest: a two-layer Mixtral trained under bf16 autocast with fused AdamW: the experts'
    grouped GEMMs run in fp32 (as the CUDA kernel does: no autocast rule, fp32 weights), the
    prediction completes two steps and `fragscope analyze` reads its log.
"""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

LAYERS, EXPERTS, TOP_K = 2, 4, 2
HIDDEN, INTERMEDIATE = 64, 40
SEQ, MICRO_BATCH = 32, 2
CONFIG = {"model_type": "mixtral", "hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE,
          "num_hidden_layers": LAYERS, "num_attention_heads": 4, "num_key_value_heads": 2,
          "num_local_experts": EXPERTS, "num_experts_per_tok": TOP_K, "vocab_size": 128,
          "max_position_embeddings": 64, "tie_word_embeddings": False}


from prerequisites import missing as _missing  # noqa: E402


class MixtralTest(unittest.TestCase):
    def test_training_under_autocast(self):
        from fragscope import predict_hf
        from fragscope.predictor import capture

        sizes = []  # (phase, bytes) of every allocation
        phase = [""]
        malloc, mark = capture._Session.malloc, capture._Session.mark

        def record_malloc(session, size, stream=0, role=None):
            sizes.append((phase[0], size))
            return malloc(session, size, stream, role)

        def record_mark(session, text):
            phase[0] = text
            return mark(session, text)

        capture._Session.malloc = record_malloc
        capture._Session.mark = record_mark
        log = os.path.join(tempfile.mkdtemp(), "mixtral.fslog")
        try:
            prediction = predict_hf(CONFIG, log, seq=SEQ, micro_batch=MICRO_BATCH, steps=2,
                                    optimizer="adamw-fused", gpu="h100-80gb")
        finally:
            capture._Session.malloc = malloc
            capture._Session.mark = mark
        print(f"peak allocated {prediction.peak_allocated}, peak reserved "
              f"{prediction.peak_reserved}, allocations {prediction.allocations}")
        for step in (0, 1):
            self.assertGreater(prediction.phase(f"step {step} / backward").allocations, 0)
        # Each layer's up projection: S = tokens x top-k rows of 2 x intermediate fp32 values,
        # then its masked copy; bf16 experts would allocate half that.
        rows = SEQ * MICRO_BATCH * TOP_K
        up = rows * 2 * INTERMEDIATE * 4
        forward = [s for p, s in sizes if p == "step 0 / forward"]
        self.assertEqual(forward.count(up), 2 * LAYERS, sorted(set(forward)))
        report = subprocess.run([os.environ["FRAGSCOPE_BIN"], "analyze", log, "--gpu",
                                 "h100-80gb", "--no-sweep", "--no-summary"],
                                capture_output=True, text=True)
        self.assertEqual(report.returncode, 0, report.stderr)


if __name__ == "__main__":
    missing = _missing()
    if missing:
        print(f"skipped: {missing}")
        sys.exit(0)
    unittest.main(verbosity=2)
