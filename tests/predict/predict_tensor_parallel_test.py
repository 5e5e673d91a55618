"""fragscope.predict of one rank of a tensor-parallel job (torchtitan's plan for a Llama:
hooks/python/fragscope/predictor/tensor_parallel.py), alone and under FSDP2 on a 2-D ("dp", "tp")
mesh, on a CPU.

Run by ctest (tests/predict/CMakeLists.txt, predict.tensor_parallel) with PYTHONPATH=hooks/python,
FRAGSCOPE_LIB_DIR and FRAGSCOPE_BIN set. Prints "skipped: ..." and exits 0 without torch (with
torch.distributed and its fake process group), transformers or libfragscope_torch.so.

The models: two layers, hidden 256, 8 heads of 32, MLP 512, vocabulary 1024, untied; 8 key/value
heads, or 4 (grouped-query attention). The weights a rank holds are what the "init / weights"
phase allocated with the weights role and still holds when the step begins.

  - PureTensorParallelTest: at tp 2 and 4, a rank's weights times tp are the unsharded model's
    plus (tp - 1) times the replicated part, exactly: the RMSNorm weights (two per layer and the
    final one), which sequence parallelism replicates, and the rotary embedding's buffers; one
    GPU's weights are the unsharded model's. The forward's collectives have the communication
    role: per layer two all-gathers (the attention's and the MLP's input) and two reduce-scatters
    (o_proj's and down_proj's output, each after its send buffer), the embedding's reduce-scatter,
    lm_head's all-gather and the loss's three all-reduces, each output of its collective's size.
    The record names tp and sp; `fragscope analyze` reads the log, its header rank 1 of 2.
  - TwoDimensionalTest: dp 2 x tp 2 (FSDP2 over dp, bf16 MixedPrecisionPolicy), rank 3: its
    weights are the sharded matrices / 4, the norms / 2 (FSDP2 shards what tp replicates) and the
    buffers; two steps complete; the four ranks predicted in one process (a new world each) form
    two tensor-parallel groups in `fragscope analyze` of their logs.
  - ErrorTest: --tp with --parallel ddp, a world size that is no multiple of --tp, data-parallel
    ranks without --parallel fsdp2 are usage errors (exit 2); tp not dividing the heads, fewer
    key/value heads than tp, a sequence that tp does not divide and tied embeddings are a
    PredictionError naming the values.
"""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

LAYERS, HIDDEN, HEADS, HEAD_DIM, FFN, VOCAB = 2, 256, 8, 32, 512, 1024
SEQ, MICRO_BATCH = 64, 2
WEIGHTS, COMMUNICATION = 1, 8  # predictor.roles


def config(kv_heads):
    return {"model_type": "llama", "num_hidden_layers": LAYERS, "hidden_size": HIDDEN,
            "num_attention_heads": HEADS, "num_key_value_heads": kv_heads,
            "head_dim": HEAD_DIM, "intermediate_size": FFN, "vocab_size": VOCAB,
            "max_position_embeddings": 256, "tie_word_embeddings": False}


def sharded_bytes(kv_heads):
    """fp32 bytes of the matrices tensor parallelism splits: the embedding and lm_head, and per
    layer q_proj and o_proj, k_proj and v_proj, gate_proj, up_proj and down_proj."""
    per_layer = 2 * HIDDEN * HEADS * HEAD_DIM + 2 * HIDDEN * kv_heads * HEAD_DIM + 3 * HIDDEN * FFN
    return 4 * (2 * VOCAB * HIDDEN + LAYERS * per_layer)


NORM_BYTES = 4 * (2 * LAYERS + 1) * HIDDEN


def buffer_bytes():
    """The model's buffers (the rotary embedding's inverse frequencies), which every rank
    holds."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    data = dict(config(HEADS))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(data.pop("model_type"),
                                                                      **data))
    return sum(b.numel() * b.element_size() for b in model.buffers())


def _missing():
    from prerequisites import missing_distributed

    return missing_distributed("torch.distributed.tensor.parallel", "parallelize_module",
                               "tensor parallelism")


def predict(kv_heads, tag, **options):
    """(the prediction, its allocations (phase, op, bytes, role, pointer), its frees
    (phase, pointer)), every allocation and free recorded in order as ("alloc", ...) and
    ("free", ...)."""
    from fragscope.predictor.hf_loop import predict_hf
    from recorded_events import recording

    log = os.path.join(tempfile.mkdtemp(), f"{tag}.fslog")
    with recording() as events:
        prediction = predict_hf(config(kv_heads), log, seq=SEQ, micro_batch=MICRO_BATCH,
                                **options)
    return prediction, events


def weights_held(events):
    """Bytes of the weights the "init / weights" phase allocated and still holds at the first
    step's forward."""
    live = {}
    for e in events:
        if e[1] == "step 0 / forward":
            break
        if e[0] == "alloc" and e[4] == WEIGHTS:
            live[e[5]] = e[3]
        elif e[0] == "free":
            live.pop(e[2], None)
    return sum(live.values())


def analyze(*logs):
    return subprocess.run([os.environ["FRAGSCOPE_BIN"], "analyze", *logs, "--gpu", "h100-80gb",
                           "--no-sweep", "--no-summary", "--threads", "1"],
                          capture_output=True, text=True)


class PureTensorParallelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.buffers = buffer_bytes()
        cls.runs = {}
        for kv_heads in (HEADS, 4):
            for tp in (1, 2, 4):
                options = {"tp": tp, "rank": tp - 1} if tp > 1 else {}
                cls.runs[kv_heads, tp] = predict(kv_heads, f"kv{kv_heads}_tp{tp}",
                                                 optimizer="none", **options)

    def test_one_gpu_holds_the_unsharded_model(self):
        for kv_heads in (HEADS, 4):
            _, events = self.runs[kv_heads, 1]
            self.assertEqual(weights_held(events),
                             sharded_bytes(kv_heads) + NORM_BYTES + self.buffers)

    def test_ranks_weights_sum_to_the_unsharded_model(self):
        for kv_heads in (HEADS, 4):
            unsharded = weights_held(self.runs[kv_heads, 1][1])
            for tp in (2, 4):
                rank = weights_held(self.runs[kv_heads, tp][1])
                print(f"kv heads {kv_heads}, tp {tp}: a rank's weights {rank} bytes, the "
                      f"unsharded model's {unsharded}")
                self.assertEqual(rank * tp, unsharded + (tp - 1) * (NORM_BYTES + self.buffers))
                self.assertEqual(rank, sharded_bytes(kv_heads) // tp + NORM_BYTES + self.buffers)

    def test_collectives_are_communication(self):
        prediction, events = self.runs[HEADS, 2]
        forward = [e for e in events if e[0] == "alloc" and e[1] == "step 0 / forward"]
        collectives = [(e[2], e[3]) for e in forward if e[4] == COMMUNICATION]
        ops = [op for op, _ in collectives]
        self.assertEqual(ops.count("_c10d_functional::all_gather_into_tensor"), 2 * LAYERS + 1)
        self.assertEqual(ops.count("_c10d_functional::reduce_scatter_tensor"), 2 * LAYERS + 1)
        self.assertEqual(ops.count("_c10d_functional::all_reduce"), 3)
        # Each reduce-scatter's send buffer (its input in dimension-0 chunks) just before it.
        sends = [i for i, op in enumerate(ops) if op == "aten::cat"]
        self.assertEqual([ops[i + 1] for i in sends],
                         ["_c10d_functional::reduce_scatter_tensor"] * (2 * LAYERS + 1))
        self.assertEqual(len(ops), 3 * (2 * LAYERS + 1) + 3, ops)
        # A rank's part of the sequence: the residual stream (fp32 under autocast) gathered
        # whole, the bf16 partial sums of o_proj and down_proj scattered back.
        local = MICRO_BATCH * SEQ // 2 * HIDDEN
        gathered = {size for op, size in collectives if op.endswith("all_gather_into_tensor")}
        self.assertEqual(gathered, {4 * 2 * local})
        scattered = [size for op, size in collectives if op.endswith("reduce_scatter_tensor")]
        self.assertEqual(scattered, [4 * local] + [2 * local] * (2 * LAYERS))
        # wait_tensor returns the collective's output: no allocation of its own.
        self.assertFalse([e for e in forward if e[2] == "_c10d_functional::wait_tensor"])

    def test_the_record_and_the_log(self):
        prediction, _ = self.runs[4, 2]
        self.assertEqual((prediction.job["tp"], prediction.job["sp"]), (2, True))
        self.assertNotIn("dp", prediction.job)
        report = analyze(prediction.log)
        self.assertEqual(report.returncode, 0, report.stderr)
        self.assertIn("rank 1)", report.stdout.splitlines()[0])
        self.assertIn("Out of memory: none", report.stdout)


class TwoDimensionalTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ranks = [predict(HEADS, f"dp2_tp2_r{rank}", tp=2, parallel="fsdp2", world_size=4,
                             rank=rank, steps=2, optimizer="adamw") for rank in range(4)]

    def test_a_rank_holds_a_quarter_and_half_the_norms(self):
        prediction, events = self.ranks[3]
        self.assertEqual(weights_held(events),
                         sharded_bytes(HEADS) // 4 + NORM_BYTES // 2 + buffer_bytes())
        self.assertEqual({k: prediction.job[k] for k in ("tp", "dp", "zero")},
                         {"tp": 2, "dp": 2, "zero": 3})
        self.assertEqual(prediction.phases[-1].marker, "end")
        self.assertIn("step 1 / optimizer", [p.marker for p in prediction.phases])

    def test_analyze_groups_the_ranks_by_tensor_parallel_group(self):
        logs = [prediction.log for prediction, _ in self.ranks]
        report = analyze(*logs)
        self.assertEqual(report.returncode, 0, report.stderr)
        self.assertIn("fragscope analysis of 4 ranks (world size 4)", report.stdout)
        self.assertIn("0: ranks 0-1 (2 here)", report.stdout)
        self.assertIn("1: ranks 2-3 (2 here)", report.stdout)
        peaks = {prediction.peak_allocated for prediction, _ in self.ranks}
        self.assertEqual(len(peaks), 1, "the ranks of a Llama are alike")


class ErrorTest(unittest.TestCase):
    def run_cli(self, *flags):
        return subprocess.run([sys.executable, "-m", "fragscope", "predict", "--config", "llama",
                               "--seq", "8", "--micro-batch", "1", "--out",
                               os.path.join(tempfile.mkdtemp(), "bad.fslog"), *flags],
                              capture_output=True, text=True)

    def test_usage_errors(self):
        for flags, words in (
                (["--tp", "2", "--parallel", "ddp", "--world-size", "4"],
                 "--tp 2 with --parallel ddp is not supported"),
                (["--tp", "4", "--parallel", "fsdp2", "--world-size", "6"],
                 "--world-size 6 is not a multiple of --tp 4"),
                (["--tp", "2", "--world-size", "4"],
                 "--world-size 4 with --tp 2 leaves 2 data-parallel ranks: they need --parallel "
                 "fsdp2"),
                (["--tp", "0"], "--tp must be a positive integer, not 0"),
                (["--tp", "2", "--mode", "inference"], "--tp predicts training steps")):
            result = self.run_cli(*flags)
            self.assertEqual(result.returncode, 2, (flags, result.stderr))
            self.assertIn(words, result.stderr, flags)

    def test_plans_that_do_not_split(self):
        from fragscope.predictor.errors import PredictionError
        from fragscope.predictor.hf_loop import predict_hf

        log = os.path.join(tempfile.mkdtemp(), "bad.fslog")
        for kv_heads, tp, seq, tied, words in (
                (HEADS, 3, 66, False, "tp 3 does not divide num_attention_heads 8"),
                (2, 4, SEQ, False, "tp 4 does not divide num_key_value_heads 2: each rank "
                                   "computes whole key/value heads (fewer key/value heads than "
                                   "ranks would need them replicated"),
                (HEADS, 4, 66, False, "seq 66 is not a multiple of tp 4"),
                (HEADS, 2, SEQ, True, "tied embeddings")):
            cfg = dict(config(kv_heads), tie_word_embeddings=tied)
            with self.assertRaisesRegex(PredictionError, words.replace("(", r"\(")):
                predict_hf(cfg, log, seq=seq, micro_batch=1, tp=tp)


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    missing = _missing()
    if missing:
        print(f"skipped: {missing}")
        sys.exit(0)
    unittest.main(verbosity=2)
