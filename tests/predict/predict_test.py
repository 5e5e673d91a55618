"""fragscope.predict against allocations recorded on real GPUs (tests/data), on a CPU.

Run by ctest (tests/predict/CMakeLists.txt) with PYTHONPATH=hooks/python, FRAGSCOPE_LIB_DIR and
FRAGSCOPE_BIN set. Prints "skipped: ..." and exits 0 without torch, transformers or
libfragscope_torch.so.

  - Gpt2OracleTest: the job of scripts/gpu/record_oracle_traces.py (GPT-2, 4 layers, batch 4,
    seqs 384/384/96/256, bf16 autocast, AdamW, no warm-up) predicted per step against the H200
    snapshots gpt2_plain (defaults) and gpt2_tuned (max_split_size_mb:128,
    roundup_power2_divisions:4), both replayed through fragscope's allocator (oracle_steps.py).
  - CapacityOomTest: the job of scripts/gpu/model_oom_check.py (GPT-2 small, SDPA, bf16, fused
    AdamW, seq 1024 x micro-batch 16, 3 steps) against tests/data/gpu/h100_gpt2_capacity_oom.fslog
    and the figures of its 1.1x run; then `fragscope analyze` of the prediction at both caps.
  - RecordedStepsTest: two training steps of GPT-2 124M (512 x 8) and of a Mistral-like model
    with grouped-query attention (1024 x 4), observed on an H100 (tests/data/gpu/*_two_steps):
    every phase's allocations, size for size and in the log's order, but for cub's temporary
    storage in backward and a few bytes at initialization; and the H100's peaks (reserved to the
    byte, allocated within 1 KiB).
"""

import collections
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(os.path.dirname(HERE), "data")


from prerequisites import missing as _missing  # noqa: E402


# The H200 of the oracle traces (tests/data/oracle/env.json) and the H100 of the capacity log.
H200_BYTES = 150109880320
H100_BYTES = 85017493504
GIB = float(1 << 30)
SEQS = (384, 384, 96, 256)
BATCH = 4


def predict_oracle_job(log, conf):
    import torch

    from fragscope import predict

    def make():
        from transformers import GPT2Config, GPT2LMHeadModel

        torch.manual_seed(0)
        cfg = GPT2Config(n_layer=4, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024)
        model = GPT2LMHeadModel(cfg).cuda()
        return {"model": model, "opt": torch.optim.AdamW(model.parameters(), lr=1e-4),
                "vocab": cfg.vocab_size}

    # The recording script's loop variables (ids, loss) live until the next step reassigns them.
    def step(state, index):
        state["ids"] = torch.randint(0, state["vocab"], (BATCH, SEQS[index]), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            state["loss"] = state["model"](state["ids"], labels=state["ids"]).loss
        state["loss"].backward()
        state["opt"].step()
        state["opt"].zero_grad(set_to_none=True)

    return predict(make, step, log, steps=len(SEQS), gpu="h200", conf=conf)


class Gpt2OracleTest(unittest.TestCase):
    # Measured accuracy (see hooks/README.md, "Accuracy"): the bounds are what the prediction
    # achieves today, so that a regression fails; the targets are 2 % / 1 % / 3 %.
    ALLOCATIONS = 0.002
    PEAK_ALLOCATED = 0.002
    PEAK_RESERVED = 0.002

    def check_variant(self, variant, conf):
        import fragscope
        import oracle_steps

        log = os.path.join(tempfile.mkdtemp(), f"gpt2_{variant}.fslog")
        prediction = predict_oracle_job(log, conf)
        snapshot, trace = oracle_steps.load_trace(
            os.path.join(DATA, "oracle", f"gpt2_{variant}.pickle"))
        lib = fragscope._library.load(fragscope._library.ALLOC)
        recorded = oracle_steps.replay_steps(lib, snapshot, trace, BATCH, SEQS, H200_BYTES, conf)
        checks = []
        for k, (allocations, peak_allocated, peak_reserved) in enumerate(recorded):
            phase = prediction.phase(f"step {k}")
            line = (f"{variant} step {k}: allocations {phase.allocations} vs {allocations}, "
                    f"peak allocated {phase.peak_allocated} vs {peak_allocated}, peak reserved "
                    f"{phase.peak_reserved} vs {peak_reserved}")
            print(line)
            checks.append((phase, allocations, peak_allocated, peak_reserved, line))
        for phase, allocations, peak_allocated, peak_reserved, line in checks:
            self.assertLess(abs(phase.allocations / allocations - 1), self.ALLOCATIONS, line)
            self.assertLess(abs(phase.peak_allocated / peak_allocated - 1), self.PEAK_ALLOCATED,
                            line)
            self.assertLess(abs(phase.peak_reserved / peak_reserved - 1), self.PEAK_RESERVED, line)
        self.assertTrue(os.path.getsize(log) > 0)

    def test_plain(self):
        self.check_variant("plain", "")

    def test_tuned(self):
        self.check_variant("tuned", "max_split_size_mb:128,roundup_power2_divisions:4")


class CapacityOomTest(unittest.TestCase):
    # scripts/gpu/model_oom_check.py's caps: 0.9x and 1.1x its estimate, as fractions of the H100.
    FRACTION_09 = 0.26854656403068167
    FRACTION_11 = FRACTION_09 / 0.9 * 1.1
    MEASURED_PEAK_ALLOCATED = 23.650 * GIB  # the 1.1x run, native allocator
    MEASURED_PEAK_RESERVED = 24.455 * GIB

    @classmethod
    def setUpClass(cls):
        from fragscope import predict_hf

        cls.log = os.path.join(tempfile.mkdtemp(), "gpt2_small.fslog")
        cls.prediction = predict_hf("gpt2", cls.log, seq=1024, micro_batch=16, steps=3,
                                    optimizer="adamw-fused", attention="sdpa", gpu="h100-80gb")

    def analyze(self, fraction):
        out = os.path.join(os.path.dirname(self.log), f"report_{fraction}.json")
        cmd = [os.environ["FRAGSCOPE_BIN"], "analyze", self.log, "--json", out, "--no-sweep",
               "--capacity", str(H100_BYTES), "--memory-fraction", repr(fraction)]
        subprocess.run(cmd, capture_output=True, text=True, check=True)
        with open(out) as f:
            return json.load(f)

    def test_peaks_match_the_run_that_fit(self):
        p = self.prediction
        print(f"peak allocated {p.peak_allocated / GIB:.3f} GiB (measured 23.650), peak reserved "
              f"{p.peak_reserved / GIB:.3f} GiB (measured 24.455)")
        self.assertLess(abs(p.peak_allocated / self.MEASURED_PEAK_ALLOCATED - 1), 0.002)
        self.assertLess(abs(p.peak_reserved / self.MEASURED_PEAK_RESERVED - 1), 0.002)

    def test_oom_in_the_first_forward_at_the_lower_cap(self):
        report = self.analyze(self.FRACTION_09)
        ooms = report["ranks"][0]["ooms"]
        self.assertGreater(ooms["count"], 0)
        first = ooms["explained"][0]
        self.assertEqual(first["phase"], "step 0 / forward")
        # The fp32 logits, as on the H100: 16 x 1024 x 50257 x 4 bytes.
        self.assertEqual(first["requested_bytes"], 16 * 1024 * 50257 * 4)
        # Who asked: the loss's log-softmax of the fp32 logits, in the model's own forward
        # (Hugging Face computes the loss there); who pins the fragmented segments: each block
        # by role and module, the LM head's bf16 weight copy (autocast's) among them.
        self.assertEqual(first["request_context"]["module"], "GPT2LMHeadModel")
        self.assertEqual(first["request_context"]["op"], "aten::_log_softmax")
        self.assertFalse(first["request_context"]["backward"])
        self.assertTrue(first["pinning"])
        for block in first["pinning"]:
            self.assertNotEqual(block["role"], "unknown", block)
            self.assertNotEqual(block["module"], "", block)
            self.assertTrue(block["op"].startswith("aten::"), block)
        self.assertIn(("lm_head", "aten::_to_copy", "saved_activations"),
                      {(b["module"], b["op"], b["role"]) for b in first["pinning"]})
        # Held by module: the live requests, summed to what the roles hold.
        modules = first["held_by_module"]
        self.assertEqual(sum(m["bytes"] for m in modules), sum(first["held_by_role"].values()))
        self.assertTrue(any(m["module"].startswith("transformer.h.") for m in modules))

    def test_no_oom_at_the_higher_cap(self):
        report = self.analyze(self.FRACTION_11)
        self.assertEqual(report["ranks"][0]["ooms"]["count"], 0)


class RecordedStepsTest(unittest.TestCase):
    # scripts/gpu/train_job.py's models: the configs the logs were recorded with.
    JOBS = {"h100_gpt2_124m_two_steps": (
                {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12,
                 "vocab_size": 50257, "n_positions": 1024}, 512, 8),
            "h100_mistral_gqa_two_steps": (
                {"model_type": "mistral", "hidden_size": 1024, "intermediate_size": 3584,
                 "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": 8,
                 "vocab_size": 32000, "max_position_embeddings": 4096,
                 "tie_word_embeddings": False}, 1024, 4)}

    @classmethod
    def setUpClass(cls):
        from logged_allocations import measured_beside

        from fragscope import predict_hf

        cls.predicted = {}
        for name, (config, seq, micro_batch) in cls.JOBS.items():
            log = os.path.join(tempfile.mkdtemp(), name + ".fslog")
            p = predict_hf(config, log, seq=seq, micro_batch=micro_batch, steps=2,
                           optimizer="adamw-fused", attention="sdpa", gpu="h100-80gb")
            measured = measured_beside(name, os.path.join(DATA, "gpu", name + ".json"), p)
            cls.predicted[name] = (p, log, measured)

    def test_each_phase_allocates_what_the_h100_did_in_its_order(self):
        from logged_allocations import CUB_TEMPORARIES, allocations, by_phase

        for name, (_, log, _) in self.predicted.items():
            with self.subTest(name):
                recorded = by_phase(a for a in allocations(os.path.join(DATA, "gpu",
                                                                        name + ".fslog"))
                                    if a[1] not in CUB_TEMPORARIES)
                predicted = by_phase(allocations(log))
                self.assertEqual(set(predicted), set(recorded))
                for phase, sizes in recorded.items():
                    if phase == "init / weights":
                        # PyTorch's and the model's few-byte device tensors at startup.
                        missing = collections.Counter(sizes) - collections.Counter(
                            predicted[phase])
                        self.assertLessEqual(sum(missing.values()), 3, missing)
                        self.assertTrue(all(size <= 8 for size in missing), missing)
                        continue
                    self.assertEqual(predicted[phase], sizes, phase)

    def test_peaks_are_the_h100s(self):
        # With segments placed as the driver places them (highest address first), the peaks are
        # PyTorch's on the H100: reserved to the byte, allocated but for the 512-byte blocks of
        # the startup tensors the prediction does not make.
        for name, (p, _, measured) in self.predicted.items():
            with self.subTest(name):
                self.assertEqual(p.peak_reserved, measured["peak_reserved"])
                self.assertLessEqual(abs(p.peak_allocated - measured["peak_allocated"]), 1024)

if __name__ == "__main__":
    missing = _missing()
    if missing:
        print(f"skipped: {missing}")
        sys.exit(0)
    sys.path.insert(0, HERE)
    unittest.main(verbosity=2)
