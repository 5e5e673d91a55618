"""python -m fragscope fit: the largest micro-batch that fits, fragmentation included, on a CPU.

Run by ctest (tests/predict/CMakeLists.txt, predict.fit) with PYTHONPATH=hooks/python,
FRAGSCOPE_LIB_DIR and FRAGSCOPE_BIN set. Prints "skipped: ..." and exits 0 without torch,
transformers or libfragscope_torch.so.

The job of tests/data/gpu/h100_gpt2_capacity_oom.fslog (GPT-2 small, seq 1024, fused AdamW) under
its 21.26 GiB cap: micro-batch 16 ran out of memory on the H100 and so must the prediction's
replay; the search must return a micro-batch that fits whose successor does not.
"""

import json
import os
import subprocess
import sys
import unittest

H100_BYTES = 85017493504
FRACTION = 0.26854656403068167  # scripts/gpu/model_oom_check.py's cap


from prerequisites import missing as _missing  # noqa: E402


class FitTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cmd = [sys.executable, "-m", "fragscope", "fit", "--config", "gpt2", "--seq", "1024",
               "--optimizer", "adamw-fused", "--capacity", str(H100_BYTES), "--memory-fraction",
               repr(FRACTION), "--json"]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise AssertionError(p.stderr)
        cls.result = json.loads(p.stdout)
        for t in cls.result["tried"]:
            print(t["micro_batch"], t["fits"], t["peak_allocated_bytes"],
                  t["peak_reserved_bytes"], t.get("oom"))
        print("largest", cls.result["largest"], "estimated", cls.result["estimated"])

    def test_the_answer_fits_and_the_next_does_not(self):
        tried = {t["micro_batch"]: t for t in self.result["tried"]}
        largest = self.result["largest"]
        self.assertGreater(largest, 0)
        self.assertLess(largest, 16)
        self.assertTrue(tried[largest]["fits"])
        self.assertFalse(tried[largest + 1]["fits"])
        self.assertFalse(tried[16]["fits"])  # as on the H100
        self.assertEqual(tried[16]["oom"]["phase"], "step 0 / forward")

    def test_the_estimator_answers_beside_it(self):
        self.assertIsInstance(self.result["estimated"], int)
        terms = {t["category"] for t in self.result["terms"]["terms"]}
        self.assertTrue({"weights", "optimizer", "activations"} <= terms)

    def test_a_usage_error_exits_2(self):
        p = subprocess.run([sys.executable, "-m", "fragscope", "fit", "--config", "gpt2",
                            "--seq", "0"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2, p.stderr)


if __name__ == "__main__":
    missing = _missing()
    if missing:
        print(f"skipped: {missing}")
        sys.exit(0)
    unittest.main(verbosity=2)
