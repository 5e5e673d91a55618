"""CUDA graphs in a prediction (predictor/cuda_graphs.py): captures allocate into the graph's
private pool as PyTorch's caching allocator does, replays allocate nothing.

Run by ctest (tests/predict/CMakeLists.txt, predict.cuda_graphs) with PYTHONPATH=hooks/python,
FRAGSCOPE_LIB_DIR and FRAGSCOPE_BIN set. Prints "skipped: ..." and exits 0 without torch,
transformers or libfragscope_torch.so. About 30 s on two cores.

  - CaptureTest: `with torch.cuda.graph(g)` around an elementwise body (no GEMM, so no cuBLAS
    workspace stays in the pool): the capture's allocations are in pool (1, 0) on the capture
    stream, but for the default generator's graph-safe seed and offset (two int64s, default
    pool); is_current_stream_capturing is true inside only; replays allocate nothing; reserved
    memory holds the pool's segments; a second graph given g.pool() shares the pool and reuses
    its freed blocks; deleting both graphs and their outputs lets empty_cache free the pool's
    segments (and the pool is gone); graph_pool_handle() gives (0, 1); PyTorch's errors.
  - MakeGraphedCallablesTest: two modules through torch.cuda.make_graphed_callables: four graphs
    in one (0, 1) pool, the backward graphs' allocations in it too; the training steps after
    allocate nothing in the pool.
  - RecordedGraphPoolTest: the graph_pool job of scripts/gpu/pools_oracle.py (two MLPs warmed up
    on a side stream, two graphs captured into one pool, replayed with eager work around them,
    then deleted), predicted, against its log observed on an H100 with torch 2.11
    (tests/data/oracle/pools/observed_graph_pool.fslog): every alloc, free, segment alloc and
    segment free in the same order with the same requested bytes, stream and pool id -- the
    default generator's seed and offset, the cuBLAS and cuBLASLt workspaces inside the pool, the
    segment torch.cuda.graph's empty_cache frees, the second graph's reuse of the pool.
  - BackwardStreamTest: backward called on a side stream allocates on that stream (the engine
    runs each node on its forward's stream).
  - CliTest: `predict --config gpt2 --mode inference --cuda-graphs`: warm-up, capture and replay
    phases, the capture's allocations in pool (1, 0), none in the replays, the model record's
    "cuda_graphs": true; `fragscope verify` faithful and `fragscope analyze` replays it without
    a warning, its private pools' peak the pool's segments; bad flag combinations are exit 2.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

from prerequisites import missing as _missing  # noqa: E402

GPT2 = ["--config", "gpt2", "--set", "n_layer=2", "--set", "n_embd=128", "--set", "n_head=4",
        "--set", "vocab_size=512", "--seq", "64", "--micro-batch", "2"]


def _log(name):
    return os.path.join(tempfile.mkdtemp(), f"{name}.fslog")


class Event:
    """One line of `fragscope dump --bytes`: kind, ptr, size, stream, pool id, phase."""

    def __init__(self, line, phase):
        self.kind = line.split()[2]
        self.phase = phase
        fields = dict(re.findall(r" (\w+)=(0x[0-9a-f]+|\d+)", line))
        self.ptr = int(fields.get("ptr", "0"), 16)
        self.size = int(fields.get("size", "0"))
        self.requested = int(fields.get("requested", "0"))
        self.stream = int(fields.get("stream", "0x0"), 16)
        pool = re.search(r" pool_id=\((\d+), (\d+)\)", line)
        self.pool = (int(pool.group(1)), int(pool.group(2))) if pool else (0, 0)


HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def sequence(log):
    """The log's allocs, frees (requested), segment allocs and frees as (kind, bytes, stream,
    pool): the requested bytes of a block (a segment's own size), the stream numbered by first
    appearance (0 the default stream), so that two runs' handles compare."""
    numbers = {0: 0}
    out = []
    for e in events(log):
        if e.kind == "segment_free" or e.kind == "segment_alloc":
            size = e.size
        else:
            size = e.requested
        numbers.setdefault(e.stream, len(numbers))
        out.append((e.kind, size, numbers[e.stream], e.pool))
    return out


def events(log):
    """The log's alloc, free and segment events, each with its phase (the marker before it)."""
    dump = subprocess.run([os.environ["FRAGSCOPE_BIN"], "dump", log, "--bytes"],
                          capture_output=True, text=True, check=True).stdout
    out, phase = [], None
    for line in dump.splitlines():
        marker = re.search(r" marker +'(.*)'", line)
        if marker:
            phase = marker.group(1)
        elif re.search(r" (alloc|free_requested|segment_alloc|segment_free) ", line):
            out.append(Event(line, phase))
    return out


def body(x):
    """Elementwise only: a temporary freed inside (x * 2, the gelu) and the output kept."""
    import torch

    return torch.nn.functional.gelu(x * 2.0) + 1.0


class CaptureTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import fragscope
        import torch
        from fragscope.predictor.capture import capture

        lib = fragscope._library.load(fragscope._library.ALLOC)
        cls.log = _log("capture")
        cls.facts = facts = {}
        journal = []

        def reserved():
            return fragscope.memory_stats.replace_stats(0)["reserved_bytes.all.current"]

        with capture(cls.log, journal=journal) as (prediction, mark):
            mark("init")
            x = torch.randn(1024, 1024, device="cuda")  # 4 MiB
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):
                for _ in range(3):
                    y = body(x)
                    del y
            facts["outside"] = torch.cuda.is_current_stream_capturing()
            mark("capture")
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                facts["inside"] = torch.cuda.is_current_stream_capturing()
                out = body(x)
            facts["after"] = torch.cuda.is_current_stream_capturing()
            facts["pool"] = g.pool()
            facts["uses"] = lib.fragscope_pool_use_count(0, *g.pool())
            facts["reserved_after_capture"] = reserved()
            mark("replay")
            before = len(journal)
            for _ in range(5):
                g.replay()
            facts["replay_journal"] = journal[before:]
            mark("share")
            g2 = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g2, pool=g.pool()):
                out2 = body(out)
            facts["shared_uses"] = lib.fragscope_pool_use_count(0, *g.pool())
            mark("delete")
            del g
            facts["uses_after_first_delete"] = lib.fragscope_pool_use_count(0, 1, 0)
            del g2
            facts["uses_after_delete"] = lib.fragscope_pool_use_count(0, 1, 0)
            torch.cuda.empty_cache()
            facts["reserved_while_outputs_live"] = reserved()
            del out, out2
            torch.cuda.empty_cache()
            facts["uses_after_empty_cache"] = lib.fragscope_pool_use_count(0, 1, 0)
            facts["reserved_at_end"] = reserved()
            mark("handle")
            facts["handle"] = torch.cuda.graph_pool_handle()
            g3 = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g3, pool=facts["handle"]):
                out3 = body(x)
            mark("errors")
            try:
                torch.cuda.CUDAGraph().capture_begin()
            except RuntimeError as e:
                facts["default_stream_error"] = str(e)
            try:
                torch.cuda.CUDAGraph().replay()
            except RuntimeError as e:
                facts["replay_error"] = str(e)
            del g3, out3, x
        cls.prediction = prediction
        cls.events = events(cls.log)

    def phase(self, name, kind="alloc"):
        return [e for e in self.events if e.phase == name and e.kind == kind]

    def test_capture_allocates_into_the_graphs_pool(self):
        self.assertEqual(self.facts["pool"], (1, 0))
        self.assertEqual(self.facts["uses"], 1)
        self.assertEqual((self.facts["outside"], self.facts["inside"], self.facts["after"]),
                         (False, True, False))
        allocs = self.phase("capture")
        rng = [e for e in allocs if e.pool == (0, 0)]
        pooled = [e for e in allocs if e.pool == (1, 0)]
        # The default generator's seed and offset: 8 bytes each (blocks of 512), default pool,
        # on the capture stream; everything else in the pool.
        self.assertEqual([e.size for e in rng], [512, 512])
        self.assertEqual(len(pooled), len(allocs) - 2)
        self.assertEqual(len(pooled), 3, [e.size for e in pooled])  # x * 2, gelu, + 1
        streams = {e.stream for e in allocs}
        self.assertEqual(len(streams), 1)
        self.assertNotEqual(streams, {0})
        # The temporaries freed inside are reused inside: x * 2's block serves the output.
        self.assertIn(pooled[2].ptr, {pooled[0].ptr, pooled[1].ptr})

    def test_reserved_holds_the_pool(self):
        segments = [e for e in self.events if e.kind == "segment_alloc" and e.pool == (1, 0)]
        self.assertTrue(segments)
        pool_bytes = sum(e.size for e in segments)
        default_live = {}
        for e in self.events:
            if e.phase in ("init", "capture") and e.pool == (0, 0):
                if e.kind == "segment_alloc":
                    default_live[e.ptr] = e.size
                elif e.kind == "segment_free":
                    del default_live[e.ptr]
        self.assertEqual(self.facts["reserved_after_capture"],
                         sum(default_live.values()) + pool_bytes)
        capture = self.prediction.phase("capture")
        self.assertGreaterEqual(capture.peak_reserved, self.facts["reserved_after_capture"])

    def test_replay_allocates_nothing(self):
        self.assertEqual(self.facts["replay_journal"], [])
        self.assertEqual(self.prediction.phase("replay").allocations, 0)

    def test_a_shared_pool_is_reused(self):
        self.assertEqual(self.facts["shared_uses"], 2)
        shared = [e for e in self.phase("share") if e.pool == (1, 0)]
        self.assertEqual(len(shared), 3)
        self.assertFalse([e for e in self.phase("share", "segment_alloc") if e.pool == (1, 0)],
                         "the second graph needs no segment of its own")
        first = {e.ptr for e in self.phase("capture") if e.pool == (1, 0)}
        self.assertTrue({e.ptr for e in shared} & first)

    def test_deleting_the_graphs_releases_the_pool(self):
        self.assertEqual(self.facts["uses_after_first_delete"], 1)
        self.assertEqual(self.facts["uses_after_delete"], 0)
        freed = [e for e in self.events if e.kind == "segment_free" and e.pool == (1, 0)]
        allocated = [e for e in self.events if e.kind == "segment_alloc" and e.pool == (1, 0)]
        self.assertEqual(sorted(e.ptr for e in freed), sorted(e.ptr for e in allocated))
        self.assertEqual({e.phase for e in freed}, {"delete"})
        self.assertLess(self.facts["reserved_at_end"], self.facts["reserved_while_outputs_live"])
        self.assertEqual(self.facts["uses_after_empty_cache"], -1, "the pool is gone")
        # The generator's seed and offset go with the last registered graph.
        rng = [e.ptr for e in self.phase("capture") if e.pool == (0, 0)]
        self.assertEqual(sorted(e.ptr for e in self.phase("delete", "free_requested")
                                if e.ptr in rng), sorted(rng))

    def test_graph_pool_handle(self):
        self.assertEqual(self.facts["handle"], (0, 1))
        handle = self.phase("handle")
        self.assertTrue(handle)
        self.assertEqual({e.pool for e in handle}, {(0, 1), (0, 0)})

    def test_pytorch_errors(self):
        self.assertIn("CUDA graphs must be captured on a non-default stream",
                      self.facts["default_stream_error"])
        self.assertIn("without a preceding successful capture", self.facts["replay_error"])

    def test_fragscope_verify_replays_it(self):
        done = subprocess.run([os.environ["FRAGSCOPE_BIN"], "verify", self.log],
                              capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("faithful", done.stdout)


class MakeGraphedCallablesTest(unittest.TestCase):
    def test_forward_and_backward_graphs_share_one_pool(self):
        import fragscope
        import torch
        from fragscope.predictor.capture import capture

        lib = fragscope._library.load(fragscope._library.ALLOC)
        log = _log("graphed")
        with capture(log) as (prediction, mark):
            mark("init")
            first = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU()).cuda()
            second = torch.nn.Linear(256, 64).cuda()
            x = torch.randn(8, 64, device="cuda", requires_grad=True)
            h = torch.randn(8, 256, device="cuda", requires_grad=True)
            mark("graphed")
            first, second = torch.cuda.make_graphed_callables((first, second), ((x,), (h,)))
            uses = lib.fragscope_pool_use_count(0, 0, 1)
            opt = torch.optim.SGD(list(first.parameters()) + list(second.parameters()), lr=0.1)
            for step in range(2):
                mark(f"step {step}")
                second(first(torch.randn(8, 64, device="cuda"))).sum().backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            del first, second, opt, x, h
        self.assertEqual(uses, 4)  # two forward and two backward graphs
        logged = events(log)
        pooled = [e for e in logged if e.kind == "alloc" and e.pool == (0, 1)]
        self.assertTrue(pooled)
        self.assertEqual(len({e.stream for e in pooled}), 1)
        # The backward captures allocate in the pool too (a weight gradient's 256 x 64 fp32).
        self.assertIn(256 * 64 * 4, {e.size for e in pooled})
        steps = [e for e in logged if e.kind == "alloc" and (e.phase or "").startswith("step")]
        self.assertTrue(steps)
        self.assertEqual({e.pool for e in steps}, {(0, 0)}, "replays allocate nothing in the pool")


class RecordedGraphPoolTest(unittest.TestCase):
    def test_every_event_as_observed_on_an_h100(self):
        import torch
        from fragscope.predictor.capture import capture

        sys.path.insert(0, os.path.join(ROOT, "scripts", "gpu"))
        try:
            import pools_oracle
        finally:
            sys.path.pop(0)
        log = _log("graph_pool")
        with capture(log, gpu="h100-80gb"):
            pools_oracle.graph_pool(torch)
        observed = sequence(os.path.join(ROOT, "tests", "data", "oracle", "pools",
                                         "observed_graph_pool.fslog"))
        predicted = sequence(log)
        self.assertEqual(len(observed), 120)
        self.assertEqual(predicted, observed)


class BackwardStreamTest(unittest.TestCase):
    def test_backward_runs_on_the_callers_stream(self):
        import torch
        from fragscope.predictor.capture import capture

        log = _log("backward")
        with capture(log) as (prediction, mark):
            mark("init")
            model = torch.nn.Linear(64, 64).cuda()
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):
                mark("forward")
                loss = model(torch.randn(8, 64, device="cuda")).sum()
                mark("backward")
                loss.backward()
                del loss
            handle = side.cuda_stream
            mark("default")
            model(torch.randn(8, 64, device="cuda")).sum().backward()
        logged = events(log)
        backward = [e for e in logged if e.kind == "alloc" and e.phase == "backward"]
        self.assertTrue(backward)
        self.assertEqual({e.stream for e in backward}, {handle})
        self.assertEqual({e.stream for e in logged if e.kind == "alloc" and e.phase == "default"},
                         {0})


class CliTest(unittest.TestCase):
    def _cli(self, *args):
        return subprocess.run([sys.executable, "-m", "fragscope", "predict", *args],
                              capture_output=True, text=True)

    def test_inference_forward_captured_and_replayed(self):
        log = _log("cli")
        done = self._cli(*GPT2, "--mode", "inference", "--cuda-graphs", "--steps", "3", "--json",
                         "--out", log)
        self.assertEqual(done.returncode, 0, done.stderr)
        result = json.loads(done.stdout)
        self.assertEqual(result["graph_pool"], [1, 0])
        phases = {p["marker"]: p for p in result["phases"]}
        self.assertEqual(list(phases), ["init / weights", "warm-up 0 / forward",
                                        "warm-up 1 / forward", "warm-up 2 / forward",
                                        "capture / forward", "step 0 / replay", "step 1 / replay",
                                        "step 2 / replay", "end"])
        for step in range(3):
            self.assertEqual(phases[f"step {step} / replay"]["allocations"], 0)
        logged = events(log)
        capture = [e for e in logged if e.kind == "alloc" and e.phase == "capture / forward"]
        self.assertEqual(len([e for e in capture if e.pool == (0, 0)]), 2)  # seed and offset
        pooled = [e for e in capture if e.pool == (1, 0)]
        self.assertEqual(len(pooled), len(capture) - 2)
        warm_up = [e for e in logged if e.kind == "alloc" and e.phase == "warm-up 2 / forward"]
        self.assertEqual({e.pool for e in warm_up}, {(0, 0)})
        self.assertNotEqual({e.stream for e in warm_up}, {e.stream for e in pooled},
                            "warm-up on a side stream, capture on the graph's")
        with open(log, "rb") as f:
            self.assertIn(b'"cuda_graphs":true', f.read())

        verify = subprocess.run([os.environ["FRAGSCOPE_BIN"], "verify", log],
                                capture_output=True, text=True)
        self.assertEqual(verify.returncode, 0, verify.stdout + verify.stderr)
        report_path = os.path.join(os.path.dirname(log), "report.json")
        analyze = subprocess.run([os.environ["FRAGSCOPE_BIN"], "analyze", log, "--gpu",
                                  "h100-80gb", "--json", report_path],
                                 capture_output=True, text=True)
        self.assertEqual(analyze.returncode, 0, analyze.stderr)
        with open(report_path) as f:
            rank = json.load(f)["ranks"][0]
        self.assertEqual(rank["replay"]["warnings"], [])
        pool_segments = sum(e.size for e in logged if e.kind == "segment_alloc" and
                            e.pool == (1, 0))
        self.assertEqual(rank["sweep"]["configs"][0]["peak_private_pool_reserved_bytes"],
                         pool_segments)

    def test_bad_flags(self):
        for args, text in (((*GPT2, "--cuda-graphs"), "--mode inference"),
                           ((*GPT2, "--mode", "inference", "--generate", "2", "--cuda-graphs"),
                            "--mode inference"),
                           (("--model-fn", "m:f", "--step-fn", "m:s", "--cuda-graphs"),
                            "--cuda-graphs goes with --config")):
            done = self._cli(*args, "--out", _log("bad"))
            self.assertEqual(done.returncode, 2, done.stderr)
            self.assertIn(text, done.stderr)


if __name__ == "__main__":
    reason = _missing()
    if reason:
        print(f"skipped: {reason}")
        sys.exit(0)
    unittest.main(verbosity=2)
