"""What the standard loop (fragscope.predict_hf) decides for the user, and says it decided.

Run by ctest (tests/predict/CMakeLists.txt, predict.assumptions) with PYTHONPATH=hooks/python,
FRAGSCOPE_LIB_DIR and FRAGSCOPE_BIN set. Prints "skipped: ..." and exits 0 without torch,
transformers or libfragscope_torch.so. Small configs (hidden 64, two layers): about 30 s.

  - AttentionTest: "auto" takes SDPA where transformers does and eager for a model without it
    (GPT-J; BLOOM, Mamba and gpt-oss run too), in the Prediction, the recorded job and `--json`;
    an explicit "sdpa" for GPT-J is exit 1 naming the model type and the choices that work;
    "eager" is recorded as flash off.
  - RandomBranchTest: OPT's LayerDrop in training takes the likelier branch: at layerdrop 0.1
    every layer runs (the same allocations as layerdrop 0) and a note says so; at 0.9 the layers
    are skipped; the mode alone on fake tensors (randn, a sample read as a number).
  - FailureSiteTest: a forward and a backward that read a fake tensor's value fail with the
    phase, the module path (or the autograd node) and the ATen op named.
  - InferenceRecordTest: an inference prediction's model record has batch, context,
    weight_dtype fp32 under bf16 autocast, autocast and use_cache false, read back by
    `fragscope analyze` as recorded.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

GPT2 = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 128,
        "n_positions": 64}
GPTJ = {"model_type": "gptj", "n_layer": 2, "n_embd": 64, "n_head": 4, "rotary_dim": 8,
        "vocab_size": 128, "n_positions": 64}
OPT = {"model_type": "opt", "num_hidden_layers": 2, "hidden_size": 64, "ffn_dim": 128,
       "word_embed_proj_dim": 64, "num_attention_heads": 4, "vocab_size": 128,
       "max_position_embeddings": 64}
LLAMA = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
         "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
         "vocab_size": 128, "max_position_embeddings": 64}
# Models whose transformers class has no SDPA path: "auto" runs them eager.
WITHOUT_SDPA = {
    "bloom": {"model_type": "bloom", "n_layer": 2, "hidden_size": 64, "n_head": 4,
              "vocab_size": 128},
    "mamba": {"model_type": "mamba", "num_hidden_layers": 2, "hidden_size": 64,
              "vocab_size": 128},
    "gpt_oss": {"model_type": "gpt_oss", "num_hidden_layers": 2, "hidden_size": 64,
                "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                "intermediate_size": 64, "num_local_experts": 4, "vocab_size": 128,
                "layer_types": ["sliding_attention", "full_attention"]},
}
SEQ, MICRO_BATCH = 32, 2

from prerequisites import missing as _missing  # noqa: E402


def _log(name):
    return os.path.join(tempfile.mkdtemp(), f"{name}.fslog")


def _predict(config, name, **kwargs):
    from fragscope import predict_hf

    return predict_hf(config, _log(name), seq=SEQ, micro_batch=MICRO_BATCH, **kwargs)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "fragscope", "predict", *args],
                          capture_output=True, text=True)


def _config_file(config):
    path = os.path.join(tempfile.mkdtemp(), "config.json")
    with open(path, "w") as f:
        json.dump(config, f)
    return path


def _assumptions(log):
    """{name: (value, basis)} of `fragscope analyze`'s model assumptions for `log`."""
    out = subprocess.run([os.environ["FRAGSCOPE_BIN"], "analyze", log, "--gpu", "h100-80gb",
                          "--no-sweep", "--json", "-"], capture_output=True, text=True,
                         check=True).stdout
    model = json.loads(out)["ranks"][0]["verdict"]["model"]
    return {a["name"]: (a["value"], a["basis"]) for a in model["assumptions"]}


class AttentionTest(unittest.TestCase):
    def test_auto_is_transformers_choice(self):
        gpt2 = _predict(GPT2, "gpt2")
        self.assertEqual(gpt2.attention, "sdpa")
        self.assertEqual(gpt2.job["attention"], "sdpa")
        gptj = _predict(GPTJ, "gptj")
        self.assertEqual(gptj.attention, "eager")
        self.assertEqual(gptj.job["attention"], "eager")

    def test_models_without_sdpa_run_eager(self):
        for name, config in WITHOUT_SDPA.items():
            with self.subTest(model_type=name):
                prediction = _predict(config, name)
                self.assertEqual(prediction.attention, "eager")
                self.assertGreater(prediction.phase("step 0 / backward").allocations, 0)

    def test_cli_says_which(self):
        log = _log("gptj_cli")
        done = _cli("--config", _config_file(GPTJ), "--seq", str(SEQ), "--micro-batch", "2",
                    "--out", log, "--json")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(json.loads(done.stdout)["attention"], "eager")
        done = _cli("--config", _config_file(GPTJ), "--seq", str(SEQ), "--micro-batch", "2",
                    "--out", log)
        self.assertIn("attention: eager (as transformers chooses)", done.stdout)

    def test_explicit_sdpa_without_sdpa_is_refused(self):
        from fragscope.predictor.errors import PredictionError

        with self.assertRaises(PredictionError) as caught:
            _predict(GPTJ, "gptj_sdpa", attention="sdpa")
        self.assertIn("gptj (GPTJForCausalLM) has no SDPA attention", str(caught.exception))
        done = _cli("--config", _config_file(GPTJ), "--seq", str(SEQ), "--micro-batch", "2",
                    "--out", _log("gptj_sdpa_cli"), "--attention", "sdpa")
        self.assertEqual(done.returncode, 1, done.stdout)
        self.assertIn("gptj (GPTJForCausalLM)", done.stderr)
        self.assertIn("--attention eager", done.stderr)
        self.assertNotIn("Traceback", done.stderr)

    def test_explicit_eager_is_recorded(self):
        prediction = _predict(GPT2, "gpt2_eager", attention="eager")
        self.assertEqual(prediction.attention, "eager")
        self.assertEqual(_assumptions(prediction.log)["flash attention"], ("off", "recorded"))
        sdpa = _predict(GPT2, "gpt2_sdpa", attention="sdpa")
        self.assertEqual(_assumptions(sdpa.log)["flash attention"], ("on", "recorded"))


class RandomBranchTest(unittest.TestCase):
    def test_layerdrop_runs_every_layer(self):
        kept = _predict(OPT, "opt_kept", overrides={"layerdrop": 0.1})
        baseline = _predict(OPT, "opt_none", overrides={"layerdrop": 0.0})
        self.assertEqual(baseline.notes, [])  # certain: nothing assumed
        print("layerdrop 0.1:", kept.notes)
        self.assertEqual(len(kept.notes), 1, kept.notes)
        note = kept.notes[0]
        self.assertTrue(note.startswith("LayerDrop: model.decoder (OPTDecoder)"), note)
        self.assertIn("torch.rand() < 0.1 (true with probability 0.1) 2 times", note)
        self.assertIn("assumed false, the likelier branch", note)
        for phase in ("step 0 / forward", "step 0 / backward", "step 0 / optimizer"):
            self.assertEqual(kept.phase(phase).allocations, baseline.phase(phase).allocations)
        self.assertEqual(kept.peak_allocated, baseline.peak_allocated)

    def test_likely_drop_skips_the_layers(self):
        dropped = _predict(OPT, "opt_dropped", overrides={"layerdrop": 0.9})
        kept = _predict(OPT, "opt_kept2", overrides={"layerdrop": 0.1})
        self.assertIn("assumed true, the likelier branch", dropped.notes[0])
        self.assertLess(dropped.phase("step 0 / forward").allocations,
                        kept.phase("step 0 / forward").allocations)

    def test_inference_draws_nothing(self):
        prediction = _predict(OPT, "opt_infer", overrides={"layerdrop": 0.1}, mode="inference")
        self.assertEqual(prediction.notes, [])

    def test_mode_on_fake_tensors(self):
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode

        from fragscope.predictor.location import Location
        from fragscope.predictor.random_branches import mode

        location = Location()
        with FakeTensorMode(), location.watching(), mode(location) as branches:
            self.assertFalse(bool(torch.randn([]) > 1.0))  # P = 0.159
            self.assertTrue(bool(torch.randn([]) > -1.0))
            self.assertTrue(bool(torch.rand(1) >= 0.25))
            self.assertEqual(float(torch.rand([])), 0.5)
            with self.assertRaises(Exception):
                bool(torch.ones([]) > 0.5)  # not a sample: still data-dependent
        self.assertEqual(len(branches.notes), 4, branches.notes)
        self.assertIn("random branch: the step read torch.randn() > 1 (true with probability "
                      "0.159) once; assumed false", branches.notes[0])
        self.assertIn("random scalar: the step read torch.rand() as a number once; assumed 0.5, "
                      "its median", branches.notes[3])


class _ReadsBack:
    """A custom autograd function whose backward reads its gradient as a number."""

    @staticmethod
    def make():
        import torch

        class ReadBack(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.clone()

            @staticmethod
            def backward(ctx, grad):
                return grad * int(grad.sum())

        return ReadBack


class FailureSiteTest(unittest.TestCase):
    def _failure(self, forward):
        from transformers.models.llama import modeling_llama

        from fragscope.predictor.errors import PredictionError

        original = modeling_llama.LlamaMLP.forward
        modeling_llama.LlamaMLP.forward = forward(original)
        try:
            with self.assertRaises(PredictionError) as caught:
                _predict(LLAMA, "llama_fails")
        finally:
            modeling_llama.LlamaMLP.forward = original
        print(caught.exception)
        return str(caught.exception)

    def test_forward_names_module_and_op(self):
        def forward(original):
            def reads(self, x):
                int(x.sum())
                return original(self, x)
            return reads

        message = self._failure(forward)
        self.assertIn("in step 0 / forward, module model.layers.0.mlp (LlamaMLP), op "
                      "aten._local_scalar_dense.default: DataDependentOutputException", message)

    def test_backward_names_node_and_op(self):
        read_back = _ReadsBack.make()

        def forward(original):
            def reads(self, x):
                return read_back.apply(original(self, x))
            return reads

        message = self._failure(forward)
        self.assertIn("in step 0 / backward, backward node ReadBackBackward, op "
                      "aten._local_scalar_dense.default", message)


class InferenceRecordTest(unittest.TestCase):
    def test_record_says_how_the_forward_ran(self):
        prediction = _predict(GPT2, "gpt2_infer", mode="inference")
        job = prediction.job
        self.assertEqual((job["batch"], job["context"]), (MICRO_BATCH, SEQ))
        self.assertEqual((job["weight_dtype"], job["autocast"], job["use_cache"]),
                         ("fp32", "bf16", False))
        self.assertNotIn("seq", job)
        self.assertNotIn("micro_batch", job)
        read = _assumptions(prediction.log)
        self.assertEqual(read["batch"], (str(MICRO_BATCH), "recorded"))
        self.assertEqual(read["context"], (str(SEQ), "recorded"))
        self.assertEqual(read["weights"], ("fp32", "recorded"))
        self.assertEqual(read["autocast"], ("bf16", "recorded"))
        self.assertEqual(read["KV cache"], ("none (use_cache off)", "recorded"))

    def test_fp32_has_no_autocast(self):
        job = _predict(GPT2, "gpt2_infer32", mode="inference", dtype="fp32").job
        self.assertEqual(job["weight_dtype"], "fp32")
        self.assertNotIn("autocast", job)

    def test_training_keeps_its_keys(self):
        job = _predict(GPT2, "gpt2_train").job
        self.assertEqual((job["seq"], job["micro_batch"], job["dtype"]), (SEQ, MICRO_BATCH,
                                                                           "bf16"))
        for key in ("batch", "context", "weight_dtype", "autocast", "use_cache"):
            self.assertNotIn(key, job)


if __name__ == "__main__":
    missing = _missing()
    if missing:
        print(f"skipped: {missing}")
        sys.exit(0)
    unittest.main(verbosity=2)
