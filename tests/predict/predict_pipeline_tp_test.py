"""fragscope.predict of one rank of a pipeline- and tensor-parallel job (torchtitan's layout: a
("pp", "dp", "tp") mesh, pp outermost; each stage split, then its layers split by the
tensor-parallel plan, then sharded by FSDP2), on a CPU.

Run by ctest (tests/predict/CMakeLists.txt, predict.pipeline_tp) with PYTHONPATH=hooks/python,
FRAGSCOPE_LIB_DIR and FRAGSCOPE_BIN set. Prints "skipped: ..." and exits 0 without torch (with
torch.distributed.pipelining, tensor parallelism and the fake process group), transformers or
libfragscope_torch.so.

A four-layer Llama (untied embeddings), pp 2, 2 microbatches of 2 x 32 tokens, optimizer none
(only the step's weights, activations and buffers):
  - StageWeightsTest: a stage's weights at tp 2 are the pp-only stage's (measured for the last,
    from its shapes for the first) sharded matrices / 2 plus its replicated part (the RMSNorm
    weights sequence parallelism replicates, the rotary embedding's buffers), for the first stage
    (the embedding) and the last (the final norm and lm_head); under FSDP2 dp 2 as well (world 8,
    ranks 3 and 4) the matrices / 4, the norms / 2;
  - ReceiveBuffersTest: the hidden states passed between stages are the rank's seq / tp
    positions: the receive buffers (communication) are 1 / tp of the pp-only stage's, the
    activations the last stage receives and the gradients the first does;
  - CollectivesTest: each microbatch's forward runs the tensor-parallel plan's collectives, with
    the communication role: per layer two all-gathers and two reduce-scatters, the embedding's
    reduce-scatter on the first stage, lm_head's all-gather and the loss's all-reduces on the
    last;
  - MeshTest: world 8 = pp 2 x dp 2 x tp 2: ranks 0-3 hold stage 0, 4-7 stage 1; the record
    names pp, dp, zero, tp and sp; `fragscope analyze` reads the log (its header's rank) and
    groups ranks 3 and 4 by stage and by tensor-parallel group;
  - CliTest: `--pp 2 --tp 2` runs; the combinations that do not split are errors naming them.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 4, 128, 4, 2, 32, 256, 1024
CONFIG = {"model_type": "llama", "num_hidden_layers": LAYERS, "hidden_size": HIDDEN,
          "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
          "intermediate_size": FFN, "vocab_size": VOCAB, "max_position_embeddings": 128,
          "tie_word_embeddings": False}
SEQ, MICRO_BATCH, MICROBATCHES, PP = 32, 2, 2, 2
PER_STAGE = LAYERS // PP
WEIGHTS, COMMUNICATION = 1, 8  # predictor.roles


def _missing():
    from prerequisites import missing_distributed

    return missing_distributed("torch.distributed.tensor.parallel", "parallelize_module",
                               "tensor parallelism") or missing_distributed(
        "torch.distributed.pipelining", "PipelineStage", "pipelining")


def sharded_bytes(stage):
    """fp32 bytes of the matrices tensor parallelism splits on `stage`: per layer q/k/v/o_proj
    and gate/up/down_proj; the embedding on the first stage, lm_head on the last."""
    per_layer = (2 * HIDDEN * HEADS * HEAD_DIM + 2 * HIDDEN * KV_HEADS * HEAD_DIM
                 + 3 * HIDDEN * FFN)
    return 4 * (PER_STAGE * per_layer + VOCAB * HIDDEN * (stage == 0) + VOCAB * HIDDEN
                * (stage == PP - 1))


def norm_bytes(stage):
    """The RMSNorm weights of `stage`: two per layer, the final one on the last stage."""
    return 4 * HIDDEN * (2 * PER_STAGE + (stage == PP - 1))


def buffer_bytes():
    """The rotary embedding's buffers, which each stage's copy of the model holds."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    data = dict(CONFIG)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(data.pop("model_type"),
                                                                      **data))
    return sum(b.numel() * b.element_size() for b in model.buffers())


_TMP = tempfile.TemporaryDirectory()
_RUNS = {}


def predict(rank, tp=1, world_size=None):
    """(the Prediction, its allocations as (phase, op, bytes, role, pointer) and frees as
    ("free", phase, pointer), in order) of one rank, made once; world_size above pp x tp: FSDP2
    over the data-parallel ranks."""
    key = (rank, tp, world_size)
    if key in _RUNS:
        return _RUNS[key]
    from fragscope.predictor.pipeline_loop import predict_pp
    from recorded_events import recording

    log = os.path.join(_TMP.name, f"r{rank}_tp{tp}_w{world_size}.fslog")
    fsdp2 = world_size is not None and world_size > PP * tp
    with recording() as events:
        prediction = predict_pp(CONFIG, log, seq=SEQ, micro_batch=MICRO_BATCH, pp=PP,
                                microbatches=MICROBATCHES, rank=rank, world_size=world_size,
                                parallel="fsdp2" if fsdp2 else None, tp=tp, optimizer="none")
    _RUNS[key] = (prediction, events)
    return _RUNS[key]


def weights_held(events):
    """Bytes of the weights allocated before the first step and still held when it begins."""
    live = {}
    for e in events:
        if e[1].startswith("step 0"):
            break
        if e[0] == "alloc" and e[4] == WEIGHTS:
            live[e[5]] = e[3]
        elif e[0] == "free":
            live.pop(e[2], None)
    return sum(live.values())


def made(events, phase, role):
    """(op, bytes) of the allocations of `role` made in `phase`."""
    return [(e[2], e[3]) for e in events if e[0] == "alloc" and e[1] == phase and e[4] == role]


class StageWeightsTest(unittest.TestCase):
    def test_a_stage_split_over_tp(self):
        buffers = buffer_bytes()
        # The pp-only last stage measured; the first stage's weights by its shapes.
        self.assertEqual(weights_held(predict(1)[1]), sharded_bytes(1) + norm_bytes(1) + buffers)
        for stage, rank in ((0, 1), (1, 3)):
            alone = sharded_bytes(stage) + norm_bytes(stage) + buffers
            split = weights_held(predict(rank, tp=2)[1])
            print(f"stage {stage}: weights {alone} bytes at pp {PP}, {split} at pp {PP} x tp 2")
            replicated = norm_bytes(stage) + buffers
            self.assertEqual(split, (alone - replicated) // 2 + replicated)

    def test_fsdp2_shards_the_split_stage(self):
        buffers = buffer_bytes()
        for stage, rank in ((0, 3), (1, 4)):
            held = weights_held(predict(rank, tp=2, world_size=8)[1])
            self.assertEqual(held, sharded_bytes(stage) // 4 + norm_bytes(stage) // 2 + buffers)


class ReceiveBuffersTest(unittest.TestCase):
    def test_a_tp_rank_receives_its_part_of_the_sequence(self):
        alone = made(predict(1)[1], "step 0 / schedule", COMMUNICATION)
        # One per microbatch: the activation the last stage receives, fp32 under autocast.
        self.assertEqual([size for _, size in alone],
                         [MICRO_BATCH * SEQ * HIDDEN * 4] * MICROBATCHES)
        for rank in (1, 3):  # the gradient stage 0 receives, the activation stage 1 receives
            split = made(predict(rank, tp=2)[1], "step 0 / schedule", COMMUNICATION)
            self.assertEqual([size for _, size in split], [size // 2 for _, size in alone])


class CollectivesTest(unittest.TestCase):
    def counts(self, rank):
        ops = [op for op, _ in made(predict(rank, tp=2)[1], "step 0 / forward 1", COMMUNICATION)]
        return {kind: ops.count(f"_c10d_functional::{kind}")
                for kind in ("all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce")}

    def test_each_microbatch_runs_the_plan(self):
        self.assertEqual(self.counts(1), {"all_gather_into_tensor": 2 * PER_STAGE,
                                          "reduce_scatter_tensor": 2 * PER_STAGE + 1,
                                          "all_reduce": 0})
        last = self.counts(3)
        self.assertEqual((last["all_gather_into_tensor"], last["reduce_scatter_tensor"]),
                         (2 * PER_STAGE + 1, 2 * PER_STAGE))
        self.assertGreater(last["all_reduce"], 0)  # loss parallelism


class MeshTest(unittest.TestCase):
    def test_pp_outermost_tp_innermost(self):
        for rank, stage in ((3, 0), (4, 1)):
            prediction = predict(rank, tp=2, world_size=8)[0]
            self.assertEqual(prediction.pipeline["stages"], [stage], rank)
            self.assertEqual((prediction.pipeline["dp"], prediction.pipeline["tp"]), (2, 2))
        job = prediction.job
        self.assertEqual({k: job[k] for k in ("pp", "dp", "zero", "tp", "sp")},
                         {"pp": 2, "dp": 2, "zero": 3, "tp": 2, "sp": True})
        report = subprocess.run([os.environ["FRAGSCOPE_BIN"], "analyze", prediction.log, "--gpu",
                                 "h100-80gb", "--threads", "1", "--json", "-"],
                                capture_output=True, text=True)
        self.assertEqual(report.returncode, 0, report.stderr)
        trace = json.loads(report.stdout)["ranks"][0]["trace"]
        self.assertEqual((trace["rank"], trace["world_size"]), (4, 8))
        # The headers' pipeline- and tensor-parallel sizes group the ranks' logs.
        logs = [predict(rank, tp=2, world_size=8)[0].log for rank in (3, 4)]
        report = subprocess.run([os.environ["FRAGSCOPE_BIN"], "analyze", *logs, "--gpu",
                                 "h100-80gb", "--no-sweep", "--no-summary", "--threads", "1"],
                                capture_output=True, text=True)
        self.assertEqual(report.returncode, 0, report.stderr)
        for group in ("0: ranks 0-3 (1 here)", "1: ranks 4-7 (1 here)", "1: ranks 2-3 (1 here)",
                      "2: ranks 4-5 (1 here)"):
            self.assertIn(group, report.stdout)


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
        result = self.run_cli("--pp", "2", "--tp", "2", "--rank", "3")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("rank 3 of 4 (pp 2 x tp 2, 1f1b", result.stdout)

    def test_errors(self):
        for flags, code, words in (
                (["--pp", "2", "--tp", "2", "--world-size", "6", "--parallel", "fsdp2"], 2,
                 "--world-size 6 is not a multiple of --pp 2 x --tp 2"),
                (["--pp", "2", "--tp", "2", "--world-size", "8"], 2,
                 "--world-size 8 with --pp 2 x --tp 2 leaves 2 data-parallel ranks"),
                (["--pp", "2", "--tp", "3"], 1, "tp 3 does not divide num_attention_heads 4"),
                (["--pp", "2", "--tp", "2", "--parallel", "ddp", "--world-size", "8"], 2,
                 "--pp with --parallel ddp is not modeled")):
            result = self.run_cli(*flags)
            self.assertEqual(result.returncode, code, (flags, result.stderr))
            self.assertIn(words, result.stderr, flags)


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    missing = _missing()
    if missing:
        print(f"skipped: {missing}")
        sys.exit(0)
    unittest.main(verbosity=2)
