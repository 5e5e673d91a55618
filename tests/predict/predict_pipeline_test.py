"""fragscope.predict of one rank of a pipeline-parallel job (torch.distributed.pipelining under
torch's fake process group), on a CPU.

Run by ctest (tests/predict/CMakeLists.txt, predict.pipeline) with PYTHONPATH=hooks/python,
FRAGSCOPE_LIB_DIR and FRAGSCOPE_BIN set. Prints "skipped: ..." and exits 0 without torch (with
torch.distributed.pipelining and the fake process group), transformers or libfragscope_torch.so.
Each log is read back by `fragscope analyze --json`; the figures are its phases' roles at peak
demand.

A four-layer Llama (untied embeddings) at pp 2 and pp 4:
  - WeightsTest: at pp 4 the first stage (the embedding) and the last (the final norm and
    lm_head) hold more weights than the middle ones, by the embedding's (the head's) bytes;
  - HeldMicrobatchesTest: the saved activations a stage holds at its peak, counted in one
    microbatch's: GPipe holds all n; 1F1B holds pp - r on rank r (at most pp: measured against
    one microbatch's saved activations, the first forward's);
  - ReceiveBuffersTest: the receive buffers PipelineStage makes on the first step (a
    microbatch's activation from the previous stage, its gradient from the next) have the
    communication role: n of each direction the stage receives in;
  - InterleavedTest: interleaved-1f1b holds two stages per rank (r and r + pp) and runs;
  - Fsdp2Test: pp 2 x FSDP2 dp 2 (world 4, pp outermost): rank 3 holds stage 1, sharded in
    half; its receive buffers are bf16 (FSDP2's param_dtype); the record names pp, dp and zero;
  - SplitTest: a stage's deep copy of the model keeps its FakeTensorMode (a copied mode's
    StorageWeakRefs would each release a weak reference they never took);
  - CliTest: `python -m fragscope predict --pp ...` and its errors (a pp that does not divide
    the layers, pp with --parallel ddp, data-parallel ranks without fsdp2); pp with --tp:
    predict_pipeline_tp_test.py.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

LAYERS, HIDDEN, VOCAB, FFN = 4, 128, 1024, 256
CONFIG = {"model_type": "llama", "num_hidden_layers": LAYERS, "hidden_size": HIDDEN,
          "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": FFN,
          "vocab_size": VOCAB, "max_position_embeddings": 128, "tie_word_embeddings": False}
SEQ, MICRO_BATCH = 32, 2
# One microbatch's hidden states between stages: fp32.
HIDDEN_BYTES = MICRO_BATCH * SEQ * HIDDEN * 4


def _missing():
    from prerequisites import missing_distributed

    return missing_distributed("torch.distributed.pipelining", "PipelineStage", "pipelining")


_TMP = tempfile.TemporaryDirectory()
_RUNS = {}


def run(pp, schedule, rank, microbatches, world_size=None):
    """(the Prediction, `fragscope analyze --json`'s rank report) of one rank, made once;
    world_size above pp: FSDP2 over the data-parallel ranks."""
    key = (pp, schedule, rank, microbatches, world_size)
    if key not in _RUNS:
        from fragscope.predictor.pipeline_loop import predict_pp

        log = os.path.join(_TMP.name, f"pp{pp}_{schedule}_{rank}_{microbatches}_"
                           f"{world_size}.fslog")
        fsdp2 = world_size is not None and world_size > pp
        prediction = predict_pp(CONFIG, log, seq=SEQ, micro_batch=MICRO_BATCH, pp=pp,
                                schedule=schedule, microbatches=microbatches, rank=rank,
                                world_size=world_size, parallel="fsdp2" if fsdp2 else None)
        report = subprocess.run([os.environ["FRAGSCOPE_BIN"], "analyze", log, "--gpu",
                                 "h100-80gb", "--threads", "1", "--json", "-"], check=True,
                                capture_output=True, text=True).stdout
        _RUNS[key] = (prediction, json.loads(report)["ranks"][0])
    return _RUNS[key]


def roles(report, phase):
    return {p["phase"]: p["roles_at_peak_demand"] for p in report["phases"]}[phase]


def saved(report):
    """The saved activations at each step phase's peak demand, in the phases' order."""
    return [p["roles_at_peak_demand"].get("saved_activations", 0) for p in report["phases"]
            if p["phase"].startswith("step 0 / forward")
            or p["phase"].startswith("step 0 / backward")]


def held_microbatches(report, per_microbatch):
    """How many microbatches' saved activations the stage holds at its most: the first
    forward's (one microbatch, at its peak) and then per_microbatch for each more."""
    one = roles(report, "step 0 / forward 0")["saved_activations"]
    return round((max(saved(report)) - one) / per_microbatch) + 1


class WeightsTest(unittest.TestCase):
    def test_first_and_last_stages_hold_the_most(self):
        weights = [roles(run(4, "1f1b", r, 4)[1], "step 0 / forward 0")["weights"]
                   for r in range(4)]
        print(f"pp 4 weights by stage: {weights}")
        for end in (0, 3):
            for middle in (1, 2):
                self.assertGreater(weights[end], weights[middle])
        # The embedding (fp32, vocab x hidden) on the first stage; lm_head and the final norm
        # on the last (the norm within the allocator's 512-byte rounding).
        self.assertEqual(weights[0] - weights[1], VOCAB * HIDDEN * 4)
        self.assertLessEqual(abs(weights[3] - weights[1] - VOCAB * HIDDEN * 4), 512)
        self.assertEqual(weights[1], weights[2])
        prediction = run(4, "1f1b", 3, 4)[0]
        self.assertEqual(prediction.pipeline["stages"], [3])
        self.assertEqual(prediction.pipeline["layers"], [[3, 4]])
        job = prediction.job
        self.assertEqual((job["pp"], job["pp_schedule"], job["pp_microbatches"],
                          job["pp_stages"]), (4, "1f1b", 4, "3"))


class HeldMicrobatchesTest(unittest.TestCase):
    def per_microbatch(self, report):
        """One microbatch's saved activations: what each GPipe forward adds."""
        held = saved(report)
        return held[1] - held[0]

    def check(self, pp, microbatches):
        gpipe = run(pp, "gpipe", 0, microbatches)[1]
        per_microbatch = self.per_microbatch(gpipe)
        self.assertGreater(per_microbatch, 0)
        self.assertEqual(held_microbatches(gpipe, per_microbatch), microbatches)
        for rank in (0, pp - 1):
            report = run(pp, "1f1b", rank, microbatches)[1]
            one = roles(report, "step 0 / forward 0")["saved_activations"]
            if rank == 0:
                self.assertEqual(one, roles(gpipe, "step 0 / forward 0")["saved_activations"])
            held = held_microbatches(report, per_microbatch)
            print(f"pp {pp}, {microbatches} microbatches: GPipe rank 0 holds {microbatches} "
                  f"(peak saved {max(saved(gpipe))} bytes), 1F1B rank {rank} holds {held} "
                  f"(peak saved {max(saved(report))} bytes, one microbatch {one})")
            self.assertEqual(held, min(pp - rank, microbatches))
            self.assertLessEqual(max(saved(report)), pp * one)
        self.assertGreater(max(saved(gpipe)), pp * roles(gpipe, "step 0 / forward 0")[
            "saved_activations"])

    def test_pp2_four_microbatches(self):
        self.check(2, 4)

    def test_pp4_eight_microbatches(self):
        self.check(4, 8)


class ReceiveBuffersTest(unittest.TestCase):
    def test_one_per_microbatch_and_direction(self):
        for rank, directions in ((0, 1), (1, 2), (3, 1)):
            report = run(4, "1f1b", rank, 4)[1]
            self.assertNotIn("communication", roles(report, "init / weights"))
            made = roles(report, "step 0 / schedule").get("communication")
            self.assertEqual(made, 4 * directions * HIDDEN_BYTES, rank)
            # Kept for the job.
            self.assertEqual(roles(report, "end").get("communication"), made, rank)
            self.assertNotIn("unknown", roles(report, "step 0 / backward 3"))


class InterleavedTest(unittest.TestCase):
    def test_two_stages_per_rank(self):
        prediction, report = run(2, "interleaved-1f1b", 1, 4)
        self.assertEqual(prediction.pipeline["stages"], [1, 3])
        self.assertEqual(prediction.pipeline["layers"], [[1, 2], [3, 4]])
        phases = [p["phase"] for p in report["phases"]]
        for stage in (1, 3):
            for mb in range(4):
                self.assertIn(f"step 0 / forward {mb} stage {stage}", phases)
                self.assertIn(f"step 0 / backward {mb} stage {stage}", phases)
        # Stage 1 receives activations and gradients, stage 3 (the last) activations only.
        self.assertEqual(roles(report, "step 0 / schedule").get("communication"),
                         3 * 4 * HIDDEN_BYTES)


class Fsdp2Test(unittest.TestCase):
    def test_pp2_by_dp2(self):
        prediction, report = run(2, "1f1b", 3, 4, world_size=4)
        self.assertEqual(prediction.pipeline["stages"], [1])
        self.assertEqual(prediction.pipeline["dp"], 2)
        job = prediction.job
        self.assertEqual((job["pp"], job["dp"], job["zero"]), (2, 2, 3))
        self.assertEqual((report["trace"]["rank"], report["trace"]["world_size"]), (3, 4))
        whole = roles(run(2, "1f1b", 1, 4)[1], "init / weights")["weights"]
        shard = roles(report, "init / weights")["weights"]
        print(f"stage 1's weights: {whole} bytes alone, {shard} bytes under FSDP2 dp 2")
        # Half of each tensor (dim-0 chunks), each allocation rounded to 512 bytes: 20 tensors.
        self.assertLessEqual(abs(shard - whole / 2), 20 * 512)
        # The activations received: bf16 (FSDP2's param_dtype), one per microbatch.
        self.assertEqual(roles(report, "step 0 / schedule").get("communication"),
                         4 * HIDDEN_BYTES // 2)
        # Rank 1 of the same world holds stage 0 (pp outermost); a prediction after an FSDP2 x
        # PP one in the same process.
        self.assertEqual(run(2, "1f1b", 1, 4, world_size=4)[0].pipeline["stages"], [0])


class SplitTest(unittest.TestCase):
    def test_a_stage_keeps_the_fake_mode(self):
        """A stage's deep copy shares the model's FakeTensorMode: a copied mode's converter
        would hold copies of its constants' StorageWeakRefs, each releasing a weak reference it
        never took (a write into freed memory that crashed a later prediction)."""
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode, maybe_get_fake_mode
        from transformers import AutoModelForCausalLM

        from fragscope.predictor import pipeline
        from fragscope.predictor.hf_loop import load_config

        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            torch.tensor(2.0)  # a constant: its storage's weak reference in the mode
            self.assertTrue(mode.fake_tensor_converter.constant_storage_mapping)
            model = AutoModelForCausalLM.from_config(load_config(CONFIG, None))
            part = pipeline.split(model, 1, 2, (2, 4))
        modes = {id(maybe_get_fake_mode(t)) for t in (*part.parameters(), *part.buffers())}
        self.assertEqual(modes, {id(mode)})


class CliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.config = os.path.join(_TMP.name, "config.json")
        with open(cls.config, "w") as f:
            json.dump(CONFIG, f)

    def run_cli(self, *flags):
        return subprocess.run([sys.executable, "-m", "fragscope", "predict", "--config",
                               self.config, "--seq", str(SEQ), "--micro-batch",
                               str(MICRO_BATCH), "--out", os.path.join(_TMP.name, "cli.fslog"),
                               *flags], capture_output=True, text=True)

    def test_predict_a_rank(self):
        result = self.run_cli("--pp", "2", "--pp-schedule", "gpipe", "--rank", "1", "--json")
        self.assertEqual(result.returncode, 0, result.stderr)
        out = json.loads(result.stdout)
        self.assertEqual((out["rank"], out["world_size"]), (1, 2))
        self.assertEqual(out["pipeline"]["stages"], [1])
        self.assertEqual(out["pipeline"]["microbatches"], 2)  # default: one per stage
        report = subprocess.run([os.environ["FRAGSCOPE_BIN"], "analyze", out["log"], "--gpu",
                                 "h100-80gb", "--threads", "1", "--json", "-"], check=True,
                                capture_output=True, text=True).stdout
        trace = json.loads(report)["ranks"][0]["trace"]
        self.assertEqual((trace["rank"], trace["world_size"]), (1, 2))

    def test_errors(self):
        result = self.run_cli("--pp", "3")
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("do not divide num_hidden_layers 4", result.stderr)
        result = self.run_cli("--pp", "4", "--pp-schedule", "interleaved-1f1b")
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("8 stages", result.stderr)
        for flags, words in ((["--pp", "2", "--parallel", "ddp", "--world-size", "4"],
                              "--pp with --parallel ddp is not modeled"),
                             (["--pp", "2", "--world-size", "4"], "they need --parallel fsdp2"),
                             (["--pp", "2", "--world-size", "3", "--parallel", "fsdp2"],
                              "--world-size 3 is not a multiple of --pp 2"),
                             (["--pp", "2", "--rank", "2"], "--rank must be in [0, 2)"),
                             (["--pp-schedule", "gpipe"], "go with --pp"),
                             (["--pp", "2", "--recompute"], "--pp with --recompute"),
                             (["--pp", "2", "--mode", "inference"], "training steps")):
            result = self.run_cli(*flags)
            self.assertEqual(result.returncode, 2, (flags, result.stderr))
            self.assertIn(words, result.stderr, flags)


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    missing = _missing()
    if missing:
        print(f"skipped: {missing}")
        sys.exit(0)
    unittest.main(verbosity=2)
