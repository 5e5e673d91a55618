"""The verdict of a predicted job that cannot fit: full-size default qwen2 and gemma configs
(transformers 5.17's defaults: 7.6 B and 8.5 B parameters) trained at seq 2048, micro-batch 1,
predicted for an H100 80GB. Each step's requests need 224.5 GiB and 159.1 GiB of the 79.18 GiB the
job may use: `fragscope analyze` says capacity-bound by the demand (2.84x, 2.01x), in the optimizer
step, and recommends no setting, although the replay's first OOM leaves ~1.5 % of headroom (which
judged alone reads as fragmentation at the cap).

Run by ctest (tests/predict/CMakeLists.txt, predict.capacity_verdict) with PYTHONPATH, FRAGSCOPE_LIB_DIR
and FRAGSCOPE_BIN set. Prints "skipped: ..." and exits 0 without torch, transformers or the hooks.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

from prerequisites import missing as _missing

GIB = float(1 << 30)


def _analyze(log):
    out = subprocess.run([os.environ["FRAGSCOPE_BIN"], "analyze", log, "--gpu", "h100-80gb",
                          "--no-summary", "--threads", "1", "--json", "-"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["ranks"][0]


class CapacityVerdictTest(unittest.TestCase):
    def check(self, model_type, peak_gib, factor):
        from fragscope.predictor.hf_loop import predict_hf

        with tempfile.TemporaryDirectory() as tmp:
            log = os.path.join(tmp, f"{model_type}.fslog")
            result = predict_hf(model_type, log, seq=2048, micro_batch=1)
            self.assertAlmostEqual(result.peak_allocated / GIB, peak_gib, delta=0.1)
            rank = _analyze(log)
        verdict = rank["verdict"]
        self.assertEqual(verdict["basis"], "demand")
        self.assertTrue(verdict["capacity_bound"])
        self.assertEqual(verdict["cause"], "capacity")
        self.assertIsNone(verdict["recommended"])
        demand = verdict["demand"]
        self.assertTrue(demand["whole_job"])
        self.assertTrue(demand["exceeds_limit"])
        self.assertAlmostEqual(demand["factor"], factor, delta=0.02)
        self.assertIn("optimizer", demand["phase"])
        # The replay's first OOM alone would not have said so: it leaves room.
        self.assertGreater(rank["ooms"]["explained"][0]["headroom_bytes"], 0)

    def test_qwen2(self):
        self.check("qwen2", 224.5, 2.84)

    def test_gemma(self):
        self.check("gemma", 159.1, 2.01)


if __name__ == "__main__":
    reason = _missing()
    if reason:
        print(f"skipped: {reason}")
        sys.exit(0)
    unittest.main()
