"""The simulated CUDA device of a prediction (predictor/device.py) as the job's code sees it.

Run by ctest (tests/predict/CMakeLists.txt, predict.device) with PYTHONPATH=hooks/python,
FRAGSCOPE_LIB_DIR and FRAGSCOPE_BIN set. Prints "skipped: ..." and exits 0 without torch,
transformers or libfragscope_torch.so.

  - StatisticsTest: torch.cuda.max_memory_allocated() is the job's peak since its own last
    reset_peak_memory_stats(), across the markers that start each phase's peaks (inductor sizes
    its autotuning's argument clones by it); reset_peak_memory_stats() starts it anew; each
    phase still reports its own peak.
  - PropertiesTest: the device's properties are the target's, its L2 cache size included (the
    size of inductor's benchmark flush buffer).
"""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from prerequisites import missing as _missing  # noqa: E402

MIB = 1 << 20


class StatisticsTest(unittest.TestCase):
    def test_peaks_span_phases_until_the_job_resets_them(self):
        import torch

        from fragscope.predictor.capture import capture

        seen = {}
        log = os.path.join(tempfile.mkdtemp(), "stats.fslog")
        with capture(log) as (prediction, mark):
            mark("big")
            big = torch.empty(64 * MIB, dtype=torch.uint8, device="cuda")
            del big
            mark("small")
            small = torch.empty(MIB, dtype=torch.uint8, device="cuda")
            seen["after marker"] = torch.cuda.max_memory_allocated()
            seen["allocated"] = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            seen["after reset"] = torch.cuda.max_memory_allocated()
            del small
        self.assertGreaterEqual(seen["after marker"], 64 * MIB)
        self.assertEqual(seen["after reset"], seen["allocated"])
        self.assertLess(prediction.phase("small").peak_allocated, 64 * MIB)
        self.assertGreaterEqual(prediction.phase("big").peak_allocated, 64 * MIB)


class PropertiesTest(unittest.TestCase):
    def test_l2_cache_follows_the_target(self):
        import torch

        from fragscope.predictor.capture import capture

        sizes = {}
        for gpu in ("h100-80gb", "a100-80gb"):
            with capture(os.path.join(tempfile.mkdtemp(), f"{gpu}.fslog"), gpu=gpu):
                sizes[gpu] = torch.cuda.get_device_properties(0).L2_cache_size
        self.assertEqual(sizes, {"h100-80gb": 50 * MIB, "a100-80gb": 40 * MIB})


if __name__ == "__main__":
    reason = _missing()
    if reason:
        print(f"skipped: {reason}")
        sys.exit(0)
    unittest.main(verbosity=2)
