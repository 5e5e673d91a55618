"""python -m fragscope carry on the GPT-2 job that died of its cap on an H100, on a CPU.

Run by ctest (tests/predict/CMakeLists.txt, predict.carry) with PYTHONPATH=hooks/python,
FRAGSCOPE_LIB_DIR and FRAGSCOPE_BIN set. Prints "skipped: ..." and exits 0 without torch,
transformers or libfragscope_torch.so.

tests/data/gpu/h100_gpt2_capacity_oom.fslog (scripts/gpu/model_oom_check.py: GPT-2 small, seq
1024 x micro-batch 16, fused AdamW, capped at 21.26 GiB) ends at its OOM in the first forward.
Carried past it with the prediction of the same job, the sweep shows that no setting completes
the step (the job is bound by its cap), and at 1.1x the cap (where the job completed on the
H100) that the step completes.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
LOG = os.path.join(os.path.dirname(HERE), "data", "gpu", "h100_gpt2_capacity_oom.fslog")
H100_BYTES = 85017493504
FRACTION_09 = 0.26854656403068167  # scripts/gpu/model_oom_check.py's cap
FRACTION_11 = FRACTION_09 / 0.9 * 1.1
LOGITS = 16 * 1024 * 50257 * 4  # the fp32 logits the job could not allocate


from prerequisites import missing as _missing  # noqa: E402


class CarryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.out = os.path.join(tempfile.mkdtemp(), "carried.fslog")
        cmd = [sys.executable, "-m", "fragscope", "carry", LOG, "--config", "gpt2", "--seq",
               "1024", "--micro-batch", "16", "--optimizer", "adamw-fused", "--capacity",
               str(H100_BYTES), "--memory-fraction", repr(FRACTION_09), "--out", cls.out,
               "--json"]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise AssertionError(p.stderr)
        cls.result = json.loads(p.stdout)
        print(json.dumps(cls.result, indent=1))

    def test_every_real_allocation_aligns_with_the_prediction(self):
        counts = self.result["counts"]
        self.assertEqual(counts["aligned_allocations"], 684)  # all before the OOM
        self.assertEqual(counts["unmatched_frees"], 0)
        self.assertGreater(counts["predicted_allocations"], 0)

    def test_no_setting_completes_the_step(self):
        rows = self.result["rows"]
        self.assertGreater(len(rows), 1)
        self.assertEqual(self.result["completing"], [])
        self.assertEqual(rows[0]["outcome"], f"dies at step 0 / forward ({LOGITS} bytes)")

    def test_the_step_completes_at_the_larger_cap(self):
        from fragscope.predictor.carry import sweep_outcomes

        rows = sweep_outcomes(os.environ["FRAGSCOPE_BIN"], self.out,
                              ["--capacity", str(H100_BYTES), "--memory-fraction",
                               repr(FRACTION_11)])
        self.assertEqual(rows[0], ("(default)", "completes the step"))

    def test_a_log_without_oom_is_refused(self):
        from fragscope.predictor.carry import CarryError, read_real_log

        with self.assertRaisesRegex(CarryError, "records no OOM"):
            read_real_log(self.out, os.environ["FRAGSCOPE_BIN"])


if __name__ == "__main__":
    missing = _missing()
    if missing:
        print(f"skipped: {missing}")
        sys.exit(0)
    unittest.main(verbosity=2)
