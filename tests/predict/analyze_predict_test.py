"""`fragscope analyze LOG --predict`: the log's recorded job predicted and set beside it.

Run by ctest (tests/predict/CMakeLists.txt, predict.analyze_predict) with PYTHONPATH,
FRAGSCOPE_LIB_DIR and FRAGSCOPE_BIN set. Prints "skipped: ..." and exits 0 without torch,
transformers or the hooks.

  - A prediction's log (it records its model and job) beside the prediction of that job: the same
    job twice, so every figure and every phase is equal (two steps: the log's forward phases set
    the steps).
  - `fragscope diff` of the H100 GPT-2 log (tests/data/gpu) against the prediction of its job:
    peak reserved equal to the byte, peak allocated within 1 KiB (the startup tensors a real
    run makes), and the phases' allocation counts listed side by side.
  - Without an interpreter that runs (FRAGSCOPE_PYTHON), and for a log without a model record,
    the report is made and a warning says why nothing was predicted.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

from prerequisites import missing as _missing

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = {"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 4, "vocab_size": 1000,
          "n_positions": 256}


def _analyze(log, env=None, *extra):
    done = subprocess.run([os.environ["FRAGSCOPE_BIN"], "analyze", log, "--gpu", "h100-80gb",
                           "--no-sweep", "--threads", "1", "--predict", "--json", "-", *extra],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["ranks"][0]


class AnalyzePredictTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from fragscope.predictor.hf_loop import predict_hf

        cls.tmp = tempfile.TemporaryDirectory()
        config = os.path.join(cls.tmp.name, "config.json")
        with open(config, "w") as f:
            json.dump(CONFIG, f)
        cls.log = os.path.join(cls.tmp.name, "job.fslog")
        predict_hf(config, cls.log, seq=128, micro_batch=2, steps=2, optimizer="adamw-fused")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_the_same_job_is_equal_phase_by_phase(self):
        rank = _analyze(self.log)
        p = rank["prediction"]
        self.assertIsNotNone(p, rank["replay"]["warnings"])
        self.assertIn("--steps 2", p["b_origin"])
        self.assertIn("--optimizer adamw-fused", p["b_origin"])
        self.assertEqual(p["a_figures"], p["b_figures"])
        self.assertGreater(p["a_figures"]["allocations"], 100)
        phases = [q["phase"] for q in p["phases"]]
        self.assertIn("step 1 / backward", phases)
        for q in p["phases"]:
            self.assertEqual(q["a"], q["b"], q["phase"])

    def test_no_interpreter_is_a_warning(self):
        env = dict(os.environ, FRAGSCOPE_PYTHON="/nonexistent/python3")
        rank = _analyze(self.log, env)
        self.assertIsNone(rank["prediction"])
        warnings = " ".join(rank["replay"]["warnings"])
        self.assertIn("--predict: the prediction did not run", warnings)
        self.assertIn("FRAGSCOPE_PYTHON", warnings)

    def test_a_log_without_a_model_record_is_a_warning(self):
        log = os.path.join(HERE, "..", "data", "gpu", "h100_gpt2_124m_two_steps.fslog")
        rank = _analyze(log)
        self.assertIsNone(rank["prediction"])
        self.assertIn("no model record", " ".join(rank["replay"]["warnings"]))


class DiffAgainstTheH100Test(unittest.TestCase):
    def test_the_prediction_beside_the_real_run(self):
        from fragscope.predictor.hf_loop import predict_hf

        config = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12,
                  "vocab_size": 50257, "n_positions": 1024}
        real = os.path.join(HERE, "..", "data", "gpu", "h100_gpt2_124m_two_steps.fslog")
        with tempfile.TemporaryDirectory() as tmp:
            log = os.path.join(tmp, "predicted.fslog")
            predict_hf(config, log, seq=512, micro_batch=8, steps=2, optimizer="adamw-fused",
                       attention="sdpa", gpu="h100-80gb")
            done = subprocess.run([os.environ["FRAGSCOPE_BIN"], "diff", real, log, "--gpu",
                                   "h100-80gb", "--json", "-"], capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        c = json.loads(done.stdout)["comparison"]
        a, b = c["a_figures"], c["b_figures"]
        self.assertEqual(a["peak_reserved_bytes"], b["peak_reserved_bytes"])
        self.assertLessEqual(abs(a["peak_allocated_bytes"] - b["peak_allocated_bytes"]), 1024)
        phases = {p["phase"]: p for p in c["phases"]}
        for phase in ("step 0 / forward", "step 1 / backward", "step 1 / optimizer"):
            self.assertIsNotNone(phases[phase]["a"], phase)
            self.assertIsNotNone(phases[phase]["b"], phase)
        # cub's temporaries in the embedding's backward: the log has a few the prediction lacks.
        backward = phases["step 0 / backward"]
        self.assertGreaterEqual(backward["a"]["allocations"], backward["b"]["allocations"])
        print(f"diff against the H100: peak allocated {a['peak_allocated_bytes']} / "
              f"{b['peak_allocated_bytes']}, reserved {a['peak_reserved_bytes']} / "
              f"{b['peak_reserved_bytes']}, allocations {a['allocations']} / {b['allocations']}")

    @staticmethod
    def _gap_at_the_demand_peak(log):
        def analyze(*extra):
            return json.loads(subprocess.run(
                [os.environ["FRAGSCOPE_BIN"], "analyze", log, "--no-sweep", "--json", "-", *extra],
                check=True, capture_output=True, text=True).stdout)["ranks"][0]
        peak = analyze()["verdict"]["demand"]["event"]
        return analyze("--at", str(peak))["model_gap"]

    def test_foreach_against_fused_adamw_is_the_optimizer_temporaries(self):
        """Llama-7B (transformers' default config), seq 2048 x 1, foreach against fused AdamW:
        the diff puts the difference in the optimizer steps, all of it in the foreach step's
        temporaries (one fp32 copy of the parameters: 6.74 B x 4 bytes = 25.1 GiB). And the fused
        job's roles at its peak against the estimator's terms."""
        from fragscope.predictor.hf_loop import predict_hf

        config = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
                  "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
                  "vocab_size": 32000, "tie_word_embeddings": False}
        with tempfile.TemporaryDirectory() as tmp:
            logs = []
            for optimizer in ("adamw-foreach", "adamw-fused"):
                logs.append(os.path.join(tmp, optimizer + ".fslog"))
                predict_hf(config, logs[-1], seq=2048, micro_batch=1, steps=2,
                           optimizer=optimizer, attention="sdpa", gpu="h100-80gb")
            done = subprocess.run([os.environ["FRAGSCOPE_BIN"], "diff", *logs, "--json", "-"],
                                  capture_output=True, text=True)
            gap = self._gap_at_the_demand_peak(logs[1])
        self.assertEqual(done.returncode, 0, done.stderr)
        # Fused: the peak is the forward's end. Each role's live bytes there are the estimator's
        # term within 3 %; the KV cache transformers builds by default (use_cache) is the rest.
        terms = {t["category"]: t for t in gap["terms"]}
        for category in ("weights", "optimizer", "activations"):
            t = terms[category]
            self.assertLess(abs(t["measured_bytes"] / t["estimated_bytes"] - 1), 0.03, t)
        kv = 2 * 32 * 4096 * 2048 * 4  # K and V, fp32 (promoted by the rotary embedding)
        self.assertEqual(terms["kv_cache"]["measured_bytes"], kv)
        self.assertEqual(gap["likely_term"], "kv_cache")
        print("Llama-7B fused at the demand peak, live / estimated: " + ", ".join(
            f"{c} {t['measured_bytes']}/{t['estimated_bytes']}" for c, t in terms.items()))
        differences = json.loads(done.stdout)["comparison"]["differences"]
        self.assertEqual({d["phase"] for d in differences},
                         {"step 0 / optimizer", "step 1 / optimizer"})
        params_fp32 = 6738415616 * 4
        for d in differences:
            self.assertLess(abs(-d["peak_demand_bytes"] / params_fp32 - 1), 0.01, d)
            self.assertEqual(d["roles"][0]["role"], "optimizer_temporaries", d)
            self.assertLess(abs(d["roles"][0]["bytes"] / d["peak_demand_bytes"] - 1), 0.01, d)


if __name__ == "__main__":
    reason = _missing()
    if reason:
        print(f"skipped: {reason}")
        sys.exit(0)
    unittest.main()
