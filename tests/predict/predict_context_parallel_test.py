"""fragscope.predict of one rank of a context-parallel job (torch's context_parallel: the sequence
sharded, SDPA as ring attention; hooks/python/fragscope/predictor/context_parallel.py) under FSDP2,
on a CPU.

Run by ctest (tests/predict/CMakeLists.txt, predict.context_parallel) with PYTHONPATH=hooks/python,
FRAGSCOPE_LIB_DIR and FRAGSCOPE_BIN set. Prints "skipped: ..." and exits 0 without torch (with
torch.distributed, context_parallel and the fake process group), transformers or
libfragscope_torch.so.

A two-layer Llama (hidden 256, 8 heads, 4 key/value heads of 32), 2 x 256 tokens per step, bf16
FSDP2 over 2 ranks, optimizer none, against the same rank without context parallelism:
  - ShardedActivationsTest: at cp 2 the rank's activations are its half of the sequence: the MLP
    (gate/up/down_proj's saved inputs and outputs, the parts the sequence sharding halves exactly)
    and the logits are half; all the forward's saved activations about half (the ring's merge of
    the partial outputs keeps a little more);
  - RingTest: each attention call's forward gathers the group's keys and values (one all-gather,
    cp x the local keys and values, bf16), with the communication role;
  - RecordTest: the record names cp and dp (the batch's ranks); `fragscope analyze` reads the log;
  - ErrorTest: --cp without --parallel fsdp2, with --tp, a world size that cp does not divide,
    with --pp (exit 2); a sequence that 2 x cp does not divide and eager attention
    (PredictionError naming them).
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 2, 256, 8, 4, 32, 512, 1024
SEQ, MICRO_BATCH = 256, 2
CONFIG = {"model_type": "llama", "num_hidden_layers": LAYERS, "hidden_size": HIDDEN,
          "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
          "intermediate_size": FFN, "vocab_size": VOCAB, "max_position_embeddings": 512,
          "tie_word_embeddings": False}
COMMUNICATION = 8  # predictor.roles
ALL_GATHER = "_c10d_functional::all_gather_into_tensor"


def _missing():
    from prerequisites import missing_distributed

    return missing_distributed("torch.distributed.tensor.experimental", "context_parallel",
                               "context parallelism")


_RUNS = {}


def predict(tag, **options):
    """(the Prediction, its allocations as (phase, op, bytes, role, module)), made once."""
    if tag in _RUNS:
        return _RUNS[tag]
    from fragscope.predictor import capture
    from fragscope.predictor.hf_loop import predict_hf

    events, phase = [], [""]
    malloc, mark = capture._Session.malloc, capture._Session.mark

    def record_malloc(session, size, stream=0, role=None):
        modules = session.contexts.modules
        events.append((phase[0], session.contexts.op, size,
                       session.role if role is None else role,
                       modules.current() if modules.stack else ""))
        return malloc(session, size, stream, role)

    def record_mark(session, text):
        phase[0] = text
        return mark(session, text)

    capture._Session.malloc, capture._Session.mark = record_malloc, record_mark
    log = os.path.join(tempfile.mkdtemp(), f"{tag}.fslog")
    try:
        prediction = predict_hf(CONFIG, log, seq=SEQ, micro_batch=MICRO_BATCH, optimizer="none",
                                parallel="fsdp2", world_size=2, rank=1, **options)
    finally:
        capture._Session.malloc, capture._Session.mark = malloc, mark
    _RUNS[tag] = (prediction, events)
    return _RUNS[tag]


def saved_at_peak(log):
    """The saved activations at the forward's peak demand (`fragscope analyze --json`)."""
    report = subprocess.run([os.environ["FRAGSCOPE_BIN"], "analyze", log, "--gpu", "h100-80gb",
                             "--threads", "1", "--json", "-"], check=True, capture_output=True,
                            text=True).stdout
    phases = json.loads(report)["ranks"][0]["phases"]
    return {p["phase"]: p["roles_at_peak_demand"] for p in phases}["step 0 / forward"][
        "saved_activations"]


def forward_bytes(events, keep):
    return sum(e[2] for e in events if e[0] == "step 0 / forward" and keep(e))


class ShardedActivationsTest(unittest.TestCase):
    def test_half_the_sequence(self):
        _, whole = predict("whole")
        _, half = predict("cp2", cp=2)

        def mlp(e):
            return ".mlp" in (e[4] or "")

        def logits(e):
            return (e[4] or "").endswith("lm_head")

        for name, keep in (("mlp", mlp), ("lm_head", logits)):
            self.assertGreater(forward_bytes(whole, keep), 0, name)
            self.assertEqual(forward_bytes(half, keep) * 2, forward_bytes(whole, keep), name)
        saved_whole = saved_at_peak(predict("whole")[0].log)
        saved_half = saved_at_peak(predict("cp2", cp=2)[0].log)
        print(f"saved activations at the forward's peak: {saved_whole} bytes, {saved_half} at "
              "cp 2")
        self.assertGreater(saved_half, 0.45 * saved_whole)
        self.assertLess(saved_half, 0.6 * saved_whole)


class RingTest(unittest.TestCase):
    def test_keys_and_values_gathered(self):
        _, events = predict("cp2", cp=2)
        gathers = [(e[2], e[3]) for e in events
                   if e[0] == "step 0 / forward" and e[1] == ALL_GATHER]
        # The local keys and values (bf16), two ranks' of them.
        local = MICRO_BATCH * KV_HEADS * (SEQ // 2) * HEAD_DIM * 2
        self.assertEqual(gathers, [(2 * 2 * local, COMMUNICATION)] * LAYERS)
        _, whole = predict("whole")
        self.assertFalse([e for e in whole if e[1] == ALL_GATHER])


class RecordTest(unittest.TestCase):
    def test_the_record_and_the_log(self):
        prediction, _ = predict("cp2", cp=2)
        self.assertEqual({k: prediction.job[k] for k in ("cp", "dp", "zero")},
                         {"cp": 2, "dp": 1, "zero": 3})
        report = subprocess.run([os.environ["FRAGSCOPE_BIN"], "analyze", prediction.log,
                                 "--gpu", "h100-80gb", "--no-sweep", "--threads", "1"],
                                capture_output=True, text=True)
        self.assertEqual(report.returncode, 0, report.stderr)


class ErrorTest(unittest.TestCase):
    def run_cli(self, *flags):
        return subprocess.run([sys.executable, "-m", "fragscope", "predict", "--config", "llama",
                               "--seq", "8", "--micro-batch", "1", "--out",
                               os.path.join(tempfile.mkdtemp(), "bad.fslog"), *flags],
                              capture_output=True, text=True)

    def test_usage_errors(self):
        for flags, words in (
                (["--cp", "2", "--world-size", "2"], "--cp 2 needs --parallel fsdp2"),
                (["--cp", "2", "--tp", "2", "--parallel", "fsdp2", "--world-size", "4"],
                 "--cp 2 with --tp 2 is not modeled"),
                (["--cp", "4", "--parallel", "fsdp2", "--world-size", "6"],
                 "--world-size 6 is not a multiple of --cp 4"),
                (["--cp", "2", "--pp", "2"], "--pp with --cp 2 is not modeled")):
            result = self.run_cli(*flags)
            self.assertEqual(result.returncode, 2, (flags, result.stderr))
            self.assertIn(words, result.stderr, flags)

    def test_jobs_that_do_not_split(self):
        from fragscope.predictor.errors import PredictionError
        from fragscope.predictor.hf_loop import predict_hf

        log = os.path.join(tempfile.mkdtemp(), "bad.fslog")
        with self.assertRaisesRegex(PredictionError, "seq 6 is not a multiple of 2 x cp 2"):
            predict_hf(CONFIG, log, seq=6, micro_batch=1, parallel="fsdp2", world_size=2, cp=2)
        with self.assertRaisesRegex(PredictionError, "--cp 2 needs SDPA attention"):
            predict_hf(CONFIG, log, seq=8, micro_batch=1, parallel="fsdp2", world_size=2, cp=2,
                       attention="eager")


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    missing = _missing()
    if missing:
        print(f"skipped: {missing}")
        sys.exit(0)
    unittest.main(verbosity=2)
