"""Every common decoder-only causal LM predicts with the predictor's default flags.

Run by ctest (tests/predict/CMakeLists.txt, predict.coverage) with PYTHONPATH=hooks/python,
FRAGSCOPE_LIB_DIR and FRAGSCOPE_BIN set. Prints "skipped: ..." and exits 0 without torch,
transformers or libfragscope_torch.so.

For each of the 30 types of causal_lm_types.py (two-layer default configs, full width), as a new
user runs it: `python -m fragscope predict --config config.json --seq 512 --micro-batch 2 --json`
(training, bf16 autocast, AdamW, attention "auto"). Each must succeed; the attention is SDPA but
for GPT-J and GPT-Neo, which transformers 5.17 runs eager (no SDPA path); the peak allocated holds
at least the 16 bytes per parameter of fp32 weights, gradients and AdamW's two states; nothing is
assumed (no model draws a random branch at these configs); the log is one `fragscope verify`
reproduces and has the model record. Prints a table (type, attention, parameters, peaks,
seconds). About 4 minutes on two cores.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from causal_lm_types import TYPES, two_layer_config  # noqa: E402
from prerequisites import missing as _missing  # noqa: E402

SEQ, MICRO_BATCH = 512, 2
# The types among TYPES whose transformers 5.17 class has no SDPA attention (_supports_sdpa
# False): "auto" runs them eager.
EAGER = {"gptj", "gpt_neo"}
# fp32 weights and gradients and AdamW's exp_avg and exp_avg_sq.
BYTES_PER_PARAM = 16
GIB = float(1 << 30)


class CoverageTest(unittest.TestCase):
    def test_every_type_predicts(self):
        directory = tempfile.mkdtemp()
        rows, failures = [], []
        for model_type in TYPES:
            with self.subTest(model_type=model_type):
                config = os.path.join(directory, f"{model_type}.json")
                with open(config, "w") as f:
                    json.dump(two_layer_config(model_type), f)
                log = os.path.join(directory, f"{model_type}.fslog")
                start = time.monotonic()
                done = subprocess.run(
                    [sys.executable, "-m", "fragscope", "predict", "--config", config, "--seq",
                     str(SEQ), "--micro-batch", str(MICRO_BATCH), "--out", log, "--json"],
                    capture_output=True, text=True)
                seconds = time.monotonic() - start
                if done.returncode != 0:
                    failures.append(model_type)
                    self.fail(f"{model_type}: exit {done.returncode}: {done.stderr[-2000:]}")
                result = json.loads(done.stdout)
                rows.append((model_type, result, seconds))
                self.assertEqual(result["attention"],
                                 "eager" if model_type in EAGER else "sdpa", model_type)
                self.assertGreater(result["params"], 0)
                self.assertGreaterEqual(result["peak_allocated_bytes"],
                                        BYTES_PER_PARAM * result["params"], model_type)
                self.assertGreaterEqual(result["peak_reserved_bytes"],
                                        result["peak_allocated_bytes"])
                self.assertEqual(result["notes"], [], model_type)
                verify = subprocess.run([os.environ["FRAGSCOPE_BIN"], "verify", log],
                                        capture_output=True, text=True)
                self.assertEqual(verify.returncode, 0, verify.stdout + verify.stderr)
                self.assertIn("faithful", verify.stdout)
                dump = subprocess.run([os.environ["FRAGSCOPE_BIN"], "dump", log],
                                      capture_output=True, text=True, check=True).stdout
                self.assertIn("model          '{\"format\":\"fragscope.model/1\"", dump)
                self.assertIn("marker         'step 0 / optimizer'", dump)
        print(f"\n{'type':12} {'attention':9} {'params':>13} {'peak alloc GiB':>14} "
              f"{'reserved GiB':>12} {'seconds':>7}")
        for model_type, r, seconds in rows:
            print(f"{model_type:12} {r['attention']:9} {r['params']:13,} "
                  f"{r['peak_allocated_bytes'] / GIB:14.3f} {r['peak_reserved_bytes'] / GIB:12.3f} "
                  f"{seconds:7.1f}")
        self.assertEqual(failures, [])


if __name__ == "__main__":
    missing = _missing()
    if missing:
        print(f"skipped: {missing}")
        sys.exit(0)
    unittest.main(verbosity=2)
