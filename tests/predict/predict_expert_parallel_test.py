"""fragscope.predict of one rank of an expert-parallel job (torchtitan's ExpertParallel on
transformers' fused experts: hooks/python/fragscope/predictor/expert_parallel.py) under FSDP2, on
a CPU.

Run by ctest (tests/predict/CMakeLists.txt, predict.expert_parallel) with PYTHONPATH=hooks/python,
FRAGSCOPE_LIB_DIR and FRAGSCOPE_BIN set. Prints "skipped: ..." and exits 0 without torch (with
torch.distributed and its fake process group), transformers or libfragscope_torch.so.

A two-layer Mixtral (8 experts, 2 per token), 2 x 32 tokens per rank, bf16 FSDP2, optimizer none:
  - LocalExpertsTest: the rank's grouped GEMMs run over its E / ep experts (CUTLASS's argument
    buffer holds one entry per group: E / 2 at ep 2, E / 4 at ep 4, E without ep); the weights a
    rank holds at rest are FSDP2's alone (the experts / (ep x dp_mod_ep) = / world);
  - DispatchTest: each MoE layer's forward makes three all-to-alls, communication buffers: the
    tokens per expert (E int32), the rows dispatched (balanced routing: T x K rows received;
    worst: ep x T x min(K, E / ep)) and combined (T x K); the backward's all-to-alls too; the
    routing assumed is in the notes and the record names ep;
  - DeepSeekTest: a three-layer DeepSeek-V3 shape (a dense first layer, shared experts, grouped
    routing, MLA) at ep 2 runs and `fragscope analyze` reads its log;
  - PipelineTest: four layers in two pipeline stages over 8 ranks (FSDP2 and ep 2 inside each
    stage, torchtitan's DeepSeek-V3 layout): both stages' ranks dispatch three all-to-alls per
    MoE layer and microbatch, and hold at rest what FSDP2 alone over the stage's ranks holds;
  - ErrorTest: --ep without --parallel fsdp2, with --tp, a world size that ep does not divide,
    --ep-routing without --ep (exit 2); ep not dividing the experts and a dense model
    (PredictionError naming them).
"""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

EXPERTS, TOP_K, HIDDEN, FFN, LAYERS = 8, 2, 64, 48, 2
SEQ, MICRO_BATCH = 32, 2
TOKENS = SEQ * MICRO_BATCH
MIXTRAL = {"model_type": "mixtral", "hidden_size": HIDDEN, "intermediate_size": FFN,
           "num_hidden_layers": LAYERS, "num_attention_heads": 4, "num_key_value_heads": 2,
           "num_local_experts": EXPERTS, "num_experts_per_tok": TOP_K, "vocab_size": 128,
           "max_position_embeddings": 64, "tie_word_embeddings": False}
DEEPSEEK = {"model_type": "deepseek_v3", "hidden_size": HIDDEN, "num_hidden_layers": 3,
            "intermediate_size": 96, "moe_intermediate_size": 32, "n_routed_experts": 16,
            "n_shared_experts": 1, "num_experts_per_tok": 4, "first_k_dense_replace": 1,
            "n_group": 4, "topk_group": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
            "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 16,
            "qk_rope_head_dim": 8, "v_head_dim": 16, "vocab_size": 128,
            "max_position_embeddings": 64, "tie_word_embeddings": False}
WEIGHTS, COMMUNICATION = 1, 8  # predictor.roles
ALL_TO_ALL = "_c10d_functional::all_to_all_single"


def _missing():
    from prerequisites import missing_distributed

    return missing_distributed("torch.distributed.tensor", "distribute_tensor", "DTensor")


_RUNS = {}


def predict(config=None, tag="mixtral", **options):
    """(the Prediction, its allocations (phase, op, bytes, role) and frees ("free", phase)), made
    once per options."""
    key = (tag, tuple(sorted(options.items())))
    if key in _RUNS:
        return _RUNS[key]
    from fragscope.predictor.hf_loop import predict_hf
    from recorded_events import op_and_role, recording

    log = os.path.join(tempfile.mkdtemp(), f"{tag}.fslog")
    # An allocation without its "alloc" tag: (phase, op, bytes, role, pointer).
    with recording(lambda *allocation: op_and_role(*allocation)[1:]) as events:
        prediction = predict_hf(config or MIXTRAL, log, seq=SEQ, micro_batch=MICRO_BATCH,
                                optimizer="none", parallel="fsdp2", **options)
    _RUNS[key] = (prediction, events)
    return _RUNS[key]


def cutlass_arguments(groups):
    """CUTLASS's grouped-GEMM argument buffer of `groups` groups: three pointer arrays (16-byte
    aligned), the problem shapes (3 int32) and three strides (int64) per group."""
    return (groups + 1) // 2 * 2 * 3 * 8 + groups * 12 + 3 * groups * 8


def weights_held(events):
    live = {}
    for e in events:
        if e[0] == "free":
            if e[1].startswith("step 0"):
                break
            live.pop(e[2], None)
        elif e[0].startswith("step 0"):
            break
        elif e[3] == WEIGHTS:
            live[e[4]] = e[2]
    return sum(live.values())


def made(events, phase, op):
    return [(e[2], e[3]) for e in events if e[0] == phase and e[1] == op]


class LocalExpertsTest(unittest.TestCase):
    def grouped_gemm_groups(self, events):
        """The argument buffers of the forward's grouped GEMMs (the workspace role)."""
        return {size for size, role in made(events, "step 0 / forward", "aten::_grouped_mm")
                if role != COMMUNICATION and size < 4096}

    def test_each_rank_computes_its_experts(self):
        for ep, world in ((2, 4), (4, 4)):
            _, events = predict(ep=ep, world_size=world, rank=1)
            self.assertEqual(self.grouped_gemm_groups(events),
                             {cutlass_arguments(EXPERTS // ep)}, ep)
        _, events = predict(world_size=4, rank=1)
        self.assertEqual(self.grouped_gemm_groups(events), {cutlass_arguments(EXPERTS)})

    def test_weights_at_rest_are_fsdp2s(self):
        alone = weights_held(predict(world_size=4, rank=1)[1])
        self.assertGreater(alone, 0)
        for ep in (2, 4):
            self.assertEqual(weights_held(predict(ep=ep, world_size=4, rank=1)[1]), alone, ep)


class DispatchTest(unittest.TestCase):
    def test_balanced_and_worst_routing(self):
        rows = TOKENS * TOP_K * HIDDEN * 2  # bf16 (FSDP2's param_dtype)
        for routing, received in (("balanced", rows),
                                  ("worst", 2 * TOKENS * min(TOP_K, EXPERTS // 2) * HIDDEN * 2)):
            prediction, events = predict(ep=2, world_size=4, rank=1, ep_routing=routing)
            forward = made(events, "step 0 / forward", ALL_TO_ALL)
            self.assertEqual(forward, [(EXPERTS * 4, COMMUNICATION), (received, COMMUNICATION),
                                       (rows, COMMUNICATION)] * LAYERS, routing)
            backward = made(events, "step 0 / backward", ALL_TO_ALL)
            self.assertEqual(len(backward), 2 * LAYERS, routing)
            self.assertEqual({role for _, role in backward}, {COMMUNICATION})
            self.assertEqual(sorted({size for size, _ in backward}), sorted({rows, received}))
            self.assertIn(f"{routing}", " ".join(prediction.notes))
            self.assertEqual((prediction.job["ep"], prediction.job["dp"]), (2, 4))


class DeepSeekTest(unittest.TestCase):
    def test_deepseek_v3_shape(self):
        prediction, events = predict(DEEPSEEK, "deepseek", ep=2, world_size=2, rank=0)
        forward = made(events, "step 0 / forward", ALL_TO_ALL)
        self.assertEqual(len(forward), 3 * 2)  # two MoE layers after the dense one
        report = subprocess.run([os.environ["FRAGSCOPE_BIN"], "analyze", prediction.log, "--gpu",
                                 "h100-80gb", "--no-sweep", "--threads", "1"],
                                capture_output=True, text=True)
        self.assertEqual(report.returncode, 0, report.stderr)
        self.assertIn("rank 0)", report.stdout.splitlines()[0])


class PipelineTest(unittest.TestCase):
    """Pipeline x FSDP2 x EP as torchtitan runs DeepSeek-V3: a four-layer Mixtral in two stages
    over 8 ranks (a stage's 4 data-parallel ranks: dp_mod_ep 2 x ep 2)."""

    def _predict(self, rank, ep):
        from fragscope.predictor.pipeline_loop import predict_pp
        from recorded_events import op_and_role, recording

        log = os.path.join(tempfile.mkdtemp(), f"pp-ep{ep}-{rank}.fslog")
        with recording(lambda *allocation: op_and_role(*allocation)[1:]) as events:
            prediction = predict_pp(dict(MIXTRAL, num_hidden_layers=4), log, seq=SEQ,
                                    micro_batch=MICRO_BATCH, pp=2, rank=rank, world_size=8,
                                    parallel="fsdp2", optimizer="none", ep=ep)
        return prediction, events

    def test_each_stage_dispatches_to_its_experts(self):
        for rank in (0, 7):  # the first stage's and the last's
            prediction, events = self._predict(rank, 2)
            self.assertEqual(prediction.pipeline["ep"], 2)
            self.assertIn("balanced routing", prediction.notes[0])
            # Three all-to-alls per MoE layer and microbatch: two layers a stage.
            for microbatch in (0, 1):
                forward = made(events, f"step 0 / forward {microbatch}", ALL_TO_ALL)
                self.assertEqual(len(forward), 3 * 2, (rank, microbatch))
                self.assertTrue(all(role == COMMUNICATION for _, role in forward))

    def test_weights_at_rest_are_fsdp2s(self):
        # ep x dp_mod_ep = a stage's dp ranks: each expert tensor / 4, as FSDP2 alone shards it.
        def weights(events):
            return sum(e[2] for e in events
                       if e[0] == "init / weights" and len(e) == 5 and e[3] == WEIGHTS)

        self.assertEqual(weights(self._predict(0, 2)[1]), weights(self._predict(0, 1)[1]))


class ErrorTest(unittest.TestCase):
    def run_cli(self, *flags):
        config = os.path.join(tempfile.mkdtemp(), "mixtral.json")
        with open(config, "w") as f:
            import json

            json.dump(MIXTRAL, f)
        return subprocess.run([sys.executable, "-m", "fragscope", "predict", "--config", config,
                               "--seq", "8", "--micro-batch", "1", "--out",
                               os.path.join(tempfile.mkdtemp(), "bad.fslog"), *flags],
                              capture_output=True, text=True)

    def test_usage_errors(self):
        for flags, words in (
                (["--ep", "2", "--world-size", "2", "--parallel", "ddp"],
                 "--ep 2 needs --parallel fsdp2"),
                (["--ep", "2", "--world-size", "2"], "--ep 2 needs --parallel fsdp2"),
                (["--ep", "2", "--tp", "2", "--parallel", "fsdp2", "--world-size", "4"],
                 "--ep 2 with --tp 2 is not modeled"),
                (["--ep", "4", "--parallel", "fsdp2", "--world-size", "6"],
                 "--world-size 6 is not a multiple of --ep 4"),
                (["--ep-routing", "worst", "--parallel", "fsdp2", "--world-size", "2"],
                 "--ep-routing goes with --ep"),
                (["--ep", "2", "--pp", "2"], "--pp with --ep 2 needs --parallel fsdp2"),
                (["--ep", "2", "--pp", "2", "--parallel", "fsdp2", "--world-size", "6"],
                 "--ep 2 does not divide a stage's 3 data-parallel ranks")):
            result = self.run_cli(*flags)
            self.assertEqual(result.returncode, 2, (flags, result.stderr))
            self.assertIn(words, result.stderr, flags)

    def test_models_that_do_not_split(self):
        from fragscope.predictor.errors import PredictionError
        from fragscope.predictor.hf_loop import predict_hf

        log = os.path.join(tempfile.mkdtemp(), "bad.fslog")
        with self.assertRaisesRegex(PredictionError, "--ep 3 does not divide the 4 experts"):
            predict_hf(dict(MIXTRAL, num_local_experts=4), log, seq=8, micro_batch=1,
                       parallel="fsdp2", world_size=3, ep=3)
        llama = {"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 64,
                 "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 128}
        with self.assertRaisesRegex(PredictionError, "LlamaForCausalLM has no mixture-of-experts"):
            predict_hf(llama, log, seq=8, micro_batch=1, parallel="fsdp2", world_size=2, ep=2)


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    missing = _missing()
    if missing:
        print(f"skipped: {missing}")
        sys.exit(0)
    unittest.main(verbosity=2)
