"""Who holds the memory in a prediction: every allocation tagged with its role (.fslog 2.5 tag
records; hooks/python/fragscope/predictor/roles.py), read back by `fragscope analyze`.

Run by ctest (tests/predict/CMakeLists.txt, predict.roles) with PYTHONPATH, FRAGSCOPE_LIB_DIR and
FRAGSCOPE_BIN set. Prints "skipped: ..." and exits 0 without torch, transformers or the hooks.

  - A two-step GPT-2 (2 layers) with foreach AdamW: at every phase's demand peak the roles sum to
    the demand and nothing is unknown; at the step's peak (the optimizer step) the weights, the
    gradients and the optimizer states are the parameters' bytes, once, once and twice (each
    tensor rounded to 512 bytes, as the allocator rounds it), and the foreach step's temporaries
    stand beside them.
  - The forward's saved activations and the backward's gradients appear in their phases.
  - A Llama (2 layers) trained with transformers' default use_cache=True holds a KV cache at the
    forward's peak: its keys and values, fp32 under bf16 autocast (the rotary embedding's fp32
    cos/sin promote the keys; the values are concatenated onto the keys' dtype), tagged kv_cache,
    and `analyze` says to turn it off; with use_cache=False there is none.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

from prerequisites import missing as _missing

# Wide and short, so that the optimizer step (states, gradients and its temporaries) is the peak.
CONFIG = {"model_type": "gpt2", "n_layer": 2, "n_embd": 512, "n_head": 4, "vocab_size": 16384,
          "n_positions": 512}


def _rounded(nbytes):
    return max(512, (nbytes + 511) // 512 * 512)


class RolesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        from fragscope.predictor.hf_loop import predict_hf

        data = dict(CONFIG)
        cfg = AutoConfig.for_model(data.pop("model_type"), **data)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg)
        cls.param_bytes = sum(_rounded(p.numel() * 4) for p in model.parameters())
        cls.tmp = tempfile.TemporaryDirectory()
        config = os.path.join(cls.tmp.name, "config.json")
        with open(config, "w") as f:
            json.dump(CONFIG, f)
        cls.log = os.path.join(cls.tmp.name, "job.fslog")
        predict_hf(config, cls.log, seq=64, micro_batch=1, steps=2, optimizer="adamw-foreach")
        out = subprocess.run([os.environ["FRAGSCOPE_BIN"], "analyze", cls.log, "--no-sweep",
                              "--threads", "1", "--json", "-"], check=True, capture_output=True,
                             text=True).stdout
        cls.rank = json.loads(out)["ranks"][0]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_roles_sum_to_the_demand_in_every_phase(self):
        for p in self.rank["phases"]:
            roles = p["roles_at_peak_demand"]
            self.assertEqual(sum(roles.values()), p["peak_demand_bytes"], p["phase"])
            self.assertNotIn("unknown", roles, p["phase"])

    def test_the_step_peak_by_role(self):
        demand = self.rank["verdict"]["demand"]
        self.assertEqual(demand["terms_source"], "the log's allocation roles")
        parts = {t["name"]: t["bytes"] for t in demand["terms"]}
        self.assertIn("optimizer", demand["phase"])
        self.assertEqual(parts["weights"], self.param_bytes)
        self.assertEqual(parts["gradients"], self.param_bytes)
        self.assertEqual(parts["optimizer_states"], 2 * self.param_bytes)
        self.assertGreater(parts["optimizer_temporaries"], 0)
        self.assertEqual(sum(parts.values()), demand["peak_bytes"])

    def test_each_phase_holds_its_own_kind(self):
        phases = {p["phase"]: p["roles_at_peak_demand"] for p in self.rank["phases"]}
        self.assertEqual(set(phases["init / weights"]) - {"weights"}, set())
        self.assertGreater(phases["step 0 / forward"].get("saved_activations", 0), 0)
        self.assertNotIn("optimizer_states", phases["step 0 / forward"])  # made at the first step
        self.assertGreater(phases["step 1 / forward"].get("optimizer_states", 0), 0)
        self.assertGreater(phases["step 0 / backward"].get("gradients", 0), 0)

    def test_dump_shows_the_contexts_and_tags(self):
        out = subprocess.run([os.environ["FRAGSCOPE_BIN"], "dump", self.log], check=True,
                             capture_output=True, text=True).stdout
        # Roles an allocation has when made are in its context; those known later in tags.
        for role in ("weights", "optimizer_temporaries", "temporaries", "workspaces"):
            self.assertRegex(out, rf"context +id=\d+ role={role} ")
        for role in ("gradients", "optimizer_states", "saved_activations"):
            self.assertRegex(out, rf"tag +ptr=0x[0-9a-f]+ role={role}")
        self.assertRegex(out, r"alloc .* context=\d+")
        self.assertIn("'transformer.h.1.mlp.c_fc'", out)
        self.assertIn("'aten::addmm'", out)


LLAMA = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "vocab_size": 1024}


class KvCacheInTrainingTest(unittest.TestCase):
    def _analyze(self, use_cache):
        from fragscope.predictor.hf_loop import predict_hf

        with tempfile.TemporaryDirectory() as tmp:
            log = os.path.join(tmp, "job.fslog")
            # Long enough that the forward's end is the step's peak (not the optimizer step).
            predict_hf(dict(LLAMA, use_cache=use_cache), log, seq=1024, micro_batch=4, steps=1,
                       optimizer="adamw-fused")
            rank = json.loads(subprocess.run(
                [os.environ["FRAGSCOPE_BIN"], "analyze", log, "--no-sweep", "--threads", "1",
                 "--json", "-"], check=True, capture_output=True, text=True).stdout)["ranks"][0]
            peak = rank["verdict"]["demand"]["event"]
            text = subprocess.run([os.environ["FRAGSCOPE_BIN"], "analyze", log, "--no-sweep",
                                   "--at", str(peak)], check=True, capture_output=True,
                                  text=True).stdout
        return rank, text

    def test_the_default_cache_is_named_and_its_fix_said(self):
        rank, text = self._analyze(use_cache=True)
        forward = {p["phase"]: p for p in rank["phases"]}["step 0 / forward"]
        # K and V of each layer: kv heads x head dim x seq x batch, fp32.
        head_dim = LLAMA["hidden_size"] // LLAMA["num_attention_heads"]
        kv = 2 * LLAMA["num_hidden_layers"] * LLAMA["num_key_value_heads"] * head_dim * 1024 * 4 * 4
        self.assertIn("forward", rank["verdict"]["demand"]["phase"])
        self.assertEqual(forward["roles_at_peak_demand"].get("kv_cache"), kv)
        self.assertIn("A KV cache of", text)
        self.assertIn("use_cache=False", text)

    def test_no_cache_without_use_cache(self):
        rank, text = self._analyze(use_cache=False)
        for p in rank["phases"]:
            self.assertNotIn("kv_cache", p["roles_at_peak_demand"], p["phase"])
        self.assertNotIn("KV cache of", text)


if __name__ == "__main__":
    reason = _missing()
    if reason:
        print(f"skipped: {reason}")
        sys.exit(0)
    unittest.main()
