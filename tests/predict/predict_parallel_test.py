"""fragscope.predict of one rank of an FSDP2 or DDP job under torch's fake process group, on a CPU.

Run by ctest (tests/predict/CMakeLists.txt, predict.parallel) with PYTHONPATH=hooks/python,
FRAGSCOPE_LIB_DIR and FRAGSCOPE_BIN set. Prints "skipped: ..." and exits 0 without torch (with
torch.distributed and its fake process group), transformers or libfragscope_torch.so.

  - Fsdp2Test: a two-layer GPT-2 under fully_shard (bf16 MixedPrecisionPolicy, AdamW): the
    optimizer states at world size 4 are a quarter of world size 1's, and so are the parameters
    the init phase allocates (the shards only); rank 3's copy-in buffer and
    all-gather output of each block (a quarter of, and all of, the block's bf16 bytes) come from
    a side stream, its unsharded parameters from the default stream, its reduce-scatter output
    (fp32) from another side stream; the peak is lower than at world size 1; the log's header
    names rank 3 (`fragscope analyze`).
  - RecordedFsdp2Test: one rank of GPT-2 124M under FSDP2 recorded on an H100 (tests/data/gpu/):
    every phase's allocations in the log's order (the embedding shard allocated twice by
    to_empty, each all-gather's and reduce-scatter's copy metadata) but cub's temporaries, and
    the log's peaks exactly.
  - DdpTest: the same model under DistributedDataParallel at world size 2, rank 1: the
    broadcast buffer of all the parameters and one bucket of them at construction, the bucket
    rebuilt before the second step into a first bucket of about 1 MiB and the rest (25 MiB cap);
    an explicit cap of 0.25 MiB makes more buckets.
  - OwnModelTest: a model and step of one's own, predict(parallel="fsdp2", make_optimizer=...),
    and a model function that wraps its model in DDP itself (parallel=None, world size 2).
  - ErrorTest: a bad world size, rank or bucket cap is a usage error (exit 2) of `python -m
    fragscope predict` that names the flag (--world-size, not world_size), and a PredictionError
    of the API.
"""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

LAYERS, HIDDEN, VOCAB, POSITIONS = 2, 128, 512, 64
CONFIG = {"model_type": "gpt2", "n_layer": LAYERS, "n_embd": HIDDEN, "n_head": 4,
          "vocab_size": VOCAB, "n_positions": POSITIONS, "bos_token_id": 0, "eos_token_id": 0}
SEQ, MICRO_BATCH = 32, 2
# A GPT-2 block's parameters: two layer norms, c_attn, attention c_proj, c_fc, MLP c_proj.
BLOCK = 2 * 2 * HIDDEN + (HIDDEN * 3 * HIDDEN + 3 * HIDDEN) + (HIDDEN * HIDDEN + HIDDEN) \
    + (HIDDEN * 4 * HIDDEN + 4 * HIDDEN) + (4 * HIDDEN * HIDDEN + HIDDEN)
# The whole model's: token and position embeddings (the head is tied), the blocks, ln_f.
PARAMS = VOCAB * HIDDEN + POSITIONS * HIDDEN + LAYERS * BLOCK + 2 * HIDDEN
PARAM_TENSORS = 2 + LAYERS * 12 + 2
MIB = 1 << 20


def _missing():
    from prerequisites import missing_distributed

    return missing_distributed("torch.distributed.fsdp", "fully_shard", "FSDP2")


def record(run):
    """(run()'s result, its events): ("alloc", phase, bytes, stream, pointer) and ("free",
    phase, pointer), in order."""
    from recorded_events import recording

    with recording(lambda phase, session, size, stream, role, ptr:
                   ("alloc", phase, size, stream, ptr)) as events:
        result = run()
    return result, events


def allocations(events, phase):
    """(bytes, stream) of each allocation in `phase`, in order."""
    return [(e[2], e[3]) for e in events if e[0] == "alloc" and e[1] == phase]


def kept_bytes(events, phase, until, below=None):
    """Bytes allocated in `phase` that are still live when `until` begins (in allocations
    smaller than `below`, if given)."""
    live = {}
    for e in events:
        if e[1] == until:
            break
        if e[0] == "alloc" and e[1] == phase:
            live[e[4]] = e[2]
        elif e[0] == "free":
            live.pop(e[2], None)
    return sum(size for size in live.values() if below is None or size < below)


def predict_gpt2(tag, **rank):
    from fragscope.predictor.hf_loop import predict_hf

    log = os.path.join(tempfile.mkdtemp(), f"{tag}.fslog")
    return record(lambda: predict_hf(CONFIG, log, seq=SEQ, micro_batch=MICRO_BATCH, steps=2,
                                     optimizer="adamw", **rank))


class Fsdp2Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.one, cls.one_events = predict_gpt2("fsdp2_1", parallel="fsdp2", world_size=1)
        cls.four, cls.four_events = predict_gpt2("fsdp2_4", parallel="fsdp2", world_size=4,
                                                 rank=3)

    def test_optimizer_states_are_sharded(self):
        one = kept_bytes(self.one_events, "step 0 / optimizer", "step 1 / forward")
        four = kept_bytes(self.four_events, "step 0 / optimizer", "step 1 / forward")
        print(f"optimizer states: world size 1 {one} bytes, world size 4 {four} bytes")
        # exp_avg and exp_avg_sq in fp32 of every parameter, and the foreach step's 512-byte
        # block (dims divide by 4: no padding).
        self.assertLess(abs(one - 2 * 4 * PARAMS), 1024)
        self.assertLess(abs(four - 2 * 4 * PARAMS // 4), 1024)
        self.assertAlmostEqual(four / one, 0.25, delta=0.01)

    def test_init_holds_only_the_shards(self):
        # Built and sharded with nothing recorded, as from the meta device, then the fp32 shards
        # allocated: a quarter of the parameters at world size 4, never the whole model.
        one = sum(size for size, _ in allocations(self.one_events, "init / weights"))
        four = sum(size for size, _ in allocations(self.four_events, "init / weights"))
        self.assertGreaterEqual(one, 4 * PARAMS)
        self.assertGreaterEqual(four, PARAMS)
        self.assertLess(four, one / 3)

    def test_all_gather_and_reduce_scatter_buffers(self):
        forward = allocations(self.four_events, "step 1 / forward")
        side = [(size, stream) for size, stream in forward if stream != 0]
        block = 2 * BLOCK  # bf16 (the MixedPrecisionPolicy's param_dtype)
        copy_in = [s for s in side if s[0] == block // 4]
        gathered = [s for s in side if s[0] == block]
        self.assertEqual(len(copy_in), LAYERS, side)
        self.assertEqual(len(gathered), LAYERS, side)
        all_gather_stream = gathered[0][1]
        self.assertTrue(all(stream == all_gather_stream for _, stream in side), side)
        # Each block's unsharded parameters (bf16) come from the default stream after its
        # all-gather: its c_attn weight among them.
        self.assertIn((2 * HIDDEN * 3 * HIDDEN, 0), forward)
        backward = allocations(self.four_events, "step 1 / backward")
        self.assertEqual(sum(1 for s in backward if s == (4 * BLOCK, 0)), LAYERS, backward)
        outputs = [s for s in backward if s[0] == 4 * BLOCK // 4 and s[1] != 0]
        self.assertEqual(len(outputs), LAYERS, backward)
        self.assertNotEqual(outputs[0][1], all_gather_stream)

    def test_peak_is_lower_than_one_gpu(self):
        print(f"peak allocated: world size 1 {self.one.peak_allocated}, world size 4 "
              f"{self.four.peak_allocated}")
        self.assertLess(self.four.peak_allocated, self.one.peak_allocated)
        self.assertEqual(self.four.rank_job.rank, 3)

    def test_log_names_the_rank(self):
        report = subprocess.run([os.environ["FRAGSCOPE_BIN"], "analyze", self.four.log, "--gpu",
                                 "h100-80gb", "--no-sweep", "--no-summary"],
                                capture_output=True, text=True)
        self.assertEqual(report.returncode, 0, report.stderr)
        self.assertIn("rank 3)", report.stdout.splitlines()[0])
        self.assertIn("Out of memory: none", report.stdout)


class RecordedFsdp2Test(unittest.TestCase):
    """The prediction of one FSDP2 rank recorded on an H100 (tests/data/gpu/
    h100_fsdp2_gpt2_124m_w4r0: scripts/gpu/parallel_check.py's GPT-2 124M, seq 512 x micro-batch
    8, two steps of fused AdamW, world size 4, rank 0) allocates what the log does, in its order,
    phase by phase."""

    NAME = "h100_fsdp2_gpt2_124m_w4r0"
    CONFIG = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12,
              "vocab_size": 50257, "n_positions": 1024}
    # The log's first two allocations, 4-byte device tensors made and freed before to_empty (not
    # by the model or FSDP2's sharding).
    STARTUP = [4, 4]

    def test_each_phase_allocates_what_the_h100_did(self):
        from logged_allocations import CUB_TEMPORARIES, by_phase, measured_beside
        from logged_allocations import allocations as logged

        from fragscope.predictor.hf_loop import predict_hf

        data = os.path.join(os.path.dirname(HERE), "data", "gpu")
        log = os.path.join(tempfile.mkdtemp(), self.NAME + ".fslog")
        p = predict_hf(self.CONFIG, log, seq=512, micro_batch=8, steps=2,
                       optimizer="adamw-fused", gpu="h100-80gb", parallel="fsdp2", world_size=4,
                       rank=0)
        measured = measured_beside(self.NAME, os.path.join(data, self.NAME + ".json"), p)
        recorded = logged(os.path.join(data, self.NAME + ".fslog"))
        self.assertEqual([size for _, size in recorded[:2]], self.STARTUP)
        recorded = [a for a in recorded[2:] if a[1] not in CUB_TEMPORARIES]
        self.assertEqual(by_phase(logged(log)), by_phase(recorded))
        self.assertEqual(p.peak_allocated, measured["peak_allocated"])
        self.assertEqual(p.peak_reserved, measured["peak_reserved"])


class DdpTest(unittest.TestCase):
    def buckets(self, events):
        """The buckets DDP allocates when it rebuilds them (before the second step): after the
        bucket indices (int32, one per parameter and the count) and the bucket sizes."""
        sizes = [size for size, _ in allocations(events, "step 1 / forward")]
        start = sizes.index(4 * (PARAM_TENSORS + 1)) + 2
        buckets = []
        for size in sizes[start:]:
            if sum(buckets) >= 4 * PARAMS:
                break
            buckets.append(size)
        return buckets

    def test_buckets(self):
        prediction, events = predict_gpt2("ddp_2", parallel="ddp", world_size=2, rank=1)
        # At construction: _sync_module_states' flattened broadcast buffer (freed there), then
        # the first iteration's one bucket, freed when the buckets are rebuilt.
        whole = [e for e in events if e[0] == "alloc" and e[2] == 4 * PARAMS]
        self.assertEqual([e[1] for e in whole], ["init / weights"] * 2)
        freed = []
        for i, e in enumerate(events):
            if e in whole:
                freed.append(next(f[1] for f in events[i + 1:] if f[0] == "free" and f[2] == e[4]))
        self.assertEqual(freed, ["init / weights", "step 1 / forward"])
        # The shape check before them, as an H100 made it at world size 4: the parameter count,
        # one count per rank (8 bytes each), then the shapes (two int64 per dimension).
        init = [size for size, _ in allocations(events, "init / weights")]
        # Dimensions: the two embeddings, 4 matrices and 8 vectors a block, the final norm's two.
        shapes = 8 * 2 * (2 * 2 + LAYERS * (4 * 2 + 8) + 2)
        at = init.index(shapes)
        self.assertEqual(init[at - 3:at], [8, 8, 8])  # world size 2: count and two gathered
        buckets = self.buckets(events)
        print(f"DDP buckets after the rebuild: {buckets}")
        self.assertEqual(sum(buckets), 4 * PARAMS)
        self.assertEqual(len(buckets), 2)
        self.assertGreaterEqual(buckets[0], MIB)
        self.assertLess(buckets[0], MIB + 4 * HIDDEN * 4 * HIDDEN)

    def test_bucket_cap(self):
        prediction, events = predict_gpt2("ddp_cap", parallel="ddp", world_size=2,
                                          bucket_cap_mb=0.25)
        buckets = self.buckets(events)
        self.assertEqual(sum(buckets), 4 * PARAMS)
        self.assertGreaterEqual(len(buckets), 6, buckets)
        self.assertTrue(all(b >= MIB // 4 for b in buckets[:-1]), buckets)


class OwnModelTest(unittest.TestCase):
    def test_fsdp2_of_a_module_list(self):
        import torch

        from fragscope import predict

        width, depth = 256, 3

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width)
                                                  for _ in range(depth))

            def forward(self, x):
                for layer in self.layers:
                    x = torch.relu(layer(x))
                return x

        def step(state, index):
            model, optimizer = state
            model(torch.randn(8, width, device="cuda")).sum().backward()
            optimizer.step()
            optimizer.zero_grad()

        log = os.path.join(tempfile.mkdtemp(), "own.fslog")
        prediction, events = record(lambda: predict(
            lambda: Net().cuda(), step, log, steps=2, parallel="fsdp2", world_size=2,
            make_optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)))
        layer = 4 * (width * width + width)  # fp32: no MixedPrecisionPolicy
        # Each layer all-gathered in the forward and again in the backward (resharded after the
        # forward), from fp32 shards without a copy-in buffer; its gradient reduce-scattered.
        side = [s for s in allocations(events, "step 1") if s[1] != 0]
        self.assertEqual([size for size, _ in side].count(layer), 2 * depth, side)
        self.assertEqual([size for size, _ in side].count(layer // 2), depth, side)
        # SGD's momentum buffers: each layer's shard, half of it at world size 2 (beside them,
        # the cuBLAS workspaces of 32 MiB and the cuBLASLt one of 1 MiB stay).
        self.assertEqual(kept_bytes(events, "step 0", "step 1", below=MIB), depth * layer // 2)


    def test_ddp_made_by_the_model_function(self):
        import torch
        from torch.nn.parallel import DistributedDataParallel

        from fragscope import predict

        width = 512

        def step(model, index):
            model(torch.randn(4, width, device="cuda")).sum().backward()

        log = os.path.join(tempfile.mkdtemp(), "own_ddp.fslog")
        prediction, events = record(lambda: predict(
            lambda: DistributedDataParallel(torch.nn.Linear(width, width).cuda()), step, log,
            steps=1, world_size=2, rank=1))
        params = 4 * (width * width + width)
        # The broadcast buffer and the first iteration's bucket: the model's own DDP ran on the
        # fake group.
        self.assertEqual([size for size, _ in allocations(events, "init")].count(params), 2)


class ErrorTest(unittest.TestCase):
    def run_cli(self, *flags):
        env = dict(os.environ)
        return subprocess.run([sys.executable, "-m", "fragscope", "predict", "--config", "gpt2",
                               "--seq", "8", "--micro-batch", "1", "--out",
                               os.path.join(tempfile.mkdtemp(), "bad.fslog"), *flags],
                              capture_output=True, text=True, env=env)

    def test_bad_rank_and_world_size(self):
        # The error names the flags as typed, never the API's argument names.
        for flags, words in ((["--parallel", "fsdp2", "--world-size", "4", "--rank", "4"],
                              "--rank must be an integer in [0, 4) for --world-size 4, not 4"),
                             (["--parallel", "ddp", "--world-size", "2", "--rank", "-1"],
                              "--rank must be an integer in [0, 2)"),
                             (["--parallel", "ddp", "--world-size", "0"],
                              "--world-size must be a positive integer, not 0"),
                             (["--world-size", "2"], "--world-size 2 needs --parallel"),
                             (["--parallel", "fsdp2", "--bucket-cap-mb", "4"],
                              "--bucket-cap-mb applies to --parallel ddp only"),
                             (["--parallel", "ddp", "--world-size", "2", "--bucket-cap-mb", "0"],
                              "--bucket-cap-mb must be positive, not 0"),
                             (["--parallel", "ddp", "--mode", "inference"], "training steps")):
            result = self.run_cli(*flags)
            self.assertEqual(result.returncode, 2, (flags, result.stderr))
            error = [line for line in result.stderr.splitlines()
                     if line.startswith("python -m fragscope predict: error: ")]
            self.assertEqual(len(error), 1, (flags, result.stderr))
            self.assertIn(words, error[0])
            for api_name in ("world_size", "bucket_cap_mb", "parallel=", "error: rank"):
                self.assertNotIn(api_name, error[0], flags)

    def test_api_error(self):
        from fragscope.predictor.errors import PredictionError
        from fragscope.predictor.hf_loop import predict_hf

        with self.assertRaisesRegex(PredictionError, "rank must be"):
            predict_hf(CONFIG, os.path.join(tempfile.mkdtemp(), "bad.fslog"), seq=8,
                       micro_batch=1, parallel="ddp", world_size=2, rank=-1)


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    missing = _missing()
    if missing:
        print(f"skipped: {missing}")
        sys.exit(0)
    unittest.main(verbosity=2)
