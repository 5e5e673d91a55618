"""transformers' `generate` predicted (fragscope.predict_hf(..., generate=N)): the KV cache as the
log holds it, step by step.

Run by ctest (tests/predict/CMakeLists.txt, predict.generate) with PYTHONPATH=hooks/python,
FRAGSCOPE_LIB_DIR and FRAGSCOPE_BIN set. Prints "skipped: ..." and exits 0 without torch,
transformers or libfragscope_torch.so. A two-layer Llama (hidden 64, 4 query and 2 key/value
heads of 16), prompts of 16 tokens x batch 2, 5 new tokens, fp32 (no autocast, so every cached
key and value is 4 bytes); about 15 s on two cores.

  - DynamicCacheTest: each decode step K allocates the 2 x layers tensors of the cache at
    prompt + K positions and frees those of the step before (DynamicLayer's torch.cat), so the
    cache's live bytes grow by 2 * layers * kv_heads * head_dim * batch * 4 per step; at the end
    (the "generated" marker, the output held) the cache is 2 * layers * kv_heads * head_dim *
    (prompt + new - 1) * batch * 4 bytes: the last new token is never fed back; dropping the
    output frees it and the sequences (batch x (prompt + new) int64); no segment is allocated
    after the prefill (the growing cache takes blocks freed before).
  - StaticCacheTest: the cache's 2 x layers tensors are allocated once, in the prefill, at
    prompt + new - 1 positions (transformers' max_length - 1), the same blocks live at every
    decode step, and no decode step allocates a tensor of a cache layer's size; the decode
    forward is compiled as transformers compiles it on a GPU (mode reduce-overhead: decode 1
    warms the graph tree up in its pool, decode 2 records, the rest replay: nothing in the pool,
    fewer allocations than the recording).
  - RecordTest: the model record says the generation (context = the positions the cache holds,
    use_cache true, prompt, new_tokens, cache, kv_dtype) and `fragscope analyze` reads it; under
    bf16 autocast a Llama (fp32 weights) caches fp32 keys and values (the rotary embedding
    promotes the keys, and the layer's values take the keys' dtype), which the record says.
  - KnownValuesTest: fake tensors made from shapes and constants are read as on the GPU; an
    in-place op on a view retires a value; random tensors stay unknown unless assumed.
  - CliTest: `--generate` implies inference and prints the cache; bad combinations are exit 2.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

LLAMA = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
         "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
         "vocab_size": 128, "max_position_embeddings": 64}
LAYERS, KV_HEADS, HEAD_DIM = 2, 2, 16
PROMPT, BATCH, NEW = 16, 2, 5
FP32 = 4


def layer_tensor_bytes(positions):
    """One layer's keys (or values) at `positions`: batch x kv_heads x positions x head_dim."""
    return BATCH * KV_HEADS * positions * HEAD_DIM * FP32


def cache_bytes(positions):
    """The whole cache: keys and values of every layer."""
    return 2 * LAYERS * layer_tensor_bytes(positions)


from prerequisites import missing as _missing  # noqa: E402


def _log(name):
    return os.path.join(tempfile.mkdtemp(), f"{name}.fslog")


def _predict(name, **kwargs):
    from fragscope import predict_hf

    kwargs.setdefault("dtype", "fp32")
    return predict_hf(LLAMA, _log(name), seq=PROMPT, micro_batch=BATCH, mode="inference",
                      generate=NEW, **kwargs)


class Log:
    """A log's allocations and frees by phase (`fragscope dump`): `phases[marker]` lists
    ("alloc" | "free", pointer, requested bytes) in order; `live[marker]` is {pointer: bytes}
    live at the marker."""

    def __init__(self, path):
        dump = subprocess.run([os.environ["FRAGSCOPE_BIN"], "dump", path, "--bytes", "--kind",
                               "alloc,free_completed,marker"], capture_output=True, text=True,
                              check=True).stdout
        self.phases, self.live, self.order = {}, {}, []
        live, phase = {}, None
        for line in dump.splitlines():
            marker = re.search(r" marker +'(.*)'", line)
            if marker:
                phase = marker.group(1)
                self.order.append(phase)
                self.phases[phase] = []
                self.live[phase] = dict(live)
                continue
            ptr = re.search(r" ptr=(0x[0-9a-f]+)", line).group(1)
            size = int(re.search(r" requested=(\d+)", line).group(1))
            kind = "alloc" if " alloc " in line else "free"
            if kind == "alloc":
                live[ptr] = size
            else:
                live.pop(ptr, None)
            self.phases.setdefault(phase, []).append((kind, ptr, size))

    def count(self, phase, kind, size):
        return sum(1 for k, _, s in self.phases[phase] if k == kind and s == size)


def _decode(k):
    return f"step 0 / decode {k}"


class DynamicCacheTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.prediction = _predict("dynamic")
        cls.log = Log(cls.prediction.log)

    def test_phases(self):
        self.assertEqual([p.marker for p in self.prediction.phases],
                         ["init / weights", "step 0 / prefill"]
                         + [_decode(k) for k in range(1, NEW)]
                         + ["step 0 / generated", "end"])

    def test_each_step_grows_the_cache_by_one_position(self):
        growth = []
        for k in range(1, NEW):
            new, old = layer_tensor_bytes(PROMPT + k), layer_tensor_bytes(PROMPT + k - 1)
            # torch.cat of the old keys (values) and the step's: a new tensor, the old one freed.
            self.assertEqual(self.log.count(_decode(k), "alloc", new), 2 * LAYERS, k)
            self.assertEqual(self.log.count(_decode(k), "free", old), 2 * LAYERS, k)
            held = sum(s for s in self.log.live[_decode(k)].values() if s == old)
            self.assertEqual(held, cache_bytes(PROMPT + k - 1), k)
            growth.append(held)
        steps = [b - a for a, b in zip(growth, growth[1:])]
        print(f"dynamic: cache bytes live at decode 1..{NEW - 1}: {growth}; per step {steps} "
              f"(2 x {LAYERS} layers x {KV_HEADS} kv heads x {HEAD_DIM} x batch {BATCH} x 4)")
        self.assertEqual(set(steps), {2 * LAYERS * KV_HEADS * HEAD_DIM * BATCH * FP32})

    def test_cache_at_the_end(self):
        positions = PROMPT + NEW - 1
        end = layer_tensor_bytes(positions)
        at_end = [s for s in self.log.live["step 0 / generated"].values() if s == end]
        self.assertEqual(len(at_end), 2 * LAYERS)
        self.assertEqual(sum(at_end), cache_bytes(positions))
        # Dropping generate's output frees the cache and the sequences, nothing else.
        freed = sorted(s for k, _, s in self.log.phases["step 0 / generated"] if k == "free")
        self.assertEqual(freed, sorted([end] * 2 * LAYERS + [BATCH * (PROMPT + NEW) * 8]))
        generated = self.prediction.generated
        self.assertEqual((generated["cache"], generated["positions"], generated["bytes"]),
                         ("DynamicCache", positions, cache_bytes(positions)))
        print(f"dynamic: cache at the end {cache_bytes(positions)} bytes = 2 x {LAYERS} x "
              f"{KV_HEADS} x {HEAD_DIM} x ({PROMPT} + {NEW} - 1) x {BATCH} x 4 "
              f"(prompt + new would be {cache_bytes(PROMPT + NEW)})")

    def test_the_cache_is_tagged_and_equals_the_estimators_term(self):
        # The blocks a transformers cache holds are kv_cache (predictor.roles.naming_kv_caches);
        # with the output still held, they are the estimator's KV-cache term to the byte.
        def analyze(*extra):
            done = subprocess.run([os.environ["FRAGSCOPE_BIN"], "analyze", self.prediction.log,
                                   "--no-sweep", "--json", "-", *extra], capture_output=True,
                                  text=True, check=True)
            return json.loads(done.stdout)["ranks"][0]

        phases = {p["phase"]: p for p in analyze()["phases"]}
        generated = phases["step 0 / generated"]
        self.assertEqual(generated["roles_at_peak_demand"]["kv_cache"],
                         cache_bytes(PROMPT + NEW - 1))
        gap = analyze("--at", str(generated["first_event"]))["model_gap"]
        kv = {t["category"]: t for t in gap["terms"]}["kv_cache"]
        self.assertEqual((kv["measured_bytes"], kv["estimated_bytes"]),
                         (cache_bytes(PROMPT + NEW - 1), cache_bytes(PROMPT + NEW - 1)))

    def test_decode_reserves_nothing_new(self):
        # Each step's new cache tensors take blocks freed before (the old cache's, the step
        # before's temporaries): no segment is allocated after the prefill.
        dump = subprocess.run([os.environ["FRAGSCOPE_BIN"], "dump", self.prediction.log,
                               "--kind", "segment_alloc,marker"], capture_output=True,
                              text=True, check=True).stdout
        segments, phase = {}, None
        for line in dump.splitlines():
            marker = re.search(r" marker +'(.*)'", line)
            if marker:
                phase = marker.group(1)
            else:
                segments[phase] = segments.get(phase, 0) + 1
        self.assertFalse([p for p in segments if p not in ("init / weights",
                                                           "step 0 / prefill")], segments)
        reused = 0
        for k in range(2, NEW):
            size = layer_tensor_bytes(PROMPT + k)
            freed = {ptr for j in range(1, k) for kind, ptr, _ in self.log.phases[_decode(j)]
                     if kind == "free"}
            reused += sum(1 for kind, ptr, s in self.log.phases[_decode(k)]
                          if kind == "alloc" and s == size and ptr in freed)
        print(f"dynamic: segments allocated by phase {segments}; {reused} of the "
              f"{2 * LAYERS * (NEW - 2)} cache tensors of decode 2..{NEW - 1} at an address an "
              "earlier decode step freed")

    def test_assumed_no_early_stop(self):
        self.assertEqual(len(self.prediction.notes), 1)
        self.assertIn("EosTokenCriteria", self.prediction.notes[0])
        self.assertIn("max_new_tokens", self.prediction.notes[0])


class StaticCacheTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.prediction = _predict("static", cache="static")
        cls.log = Log(cls.prediction.log)

    def test_allocated_once_at_max_length(self):
        positions = PROMPT + NEW - 1
        full = layer_tensor_bytes(positions)
        self.assertEqual(self.log.count("step 0 / prefill", "alloc", full), 2 * LAYERS)
        held = {p for p, s in self.log.live[_decode(1)].items() if s == full}
        self.assertEqual(len(held), 2 * LAYERS)
        sizes = {layer_tensor_bytes(n) for n in range(PROMPT, positions + 1)}
        for k in range(1, NEW):
            # The same blocks, written in place; nothing of a cache layer's size is allocated.
            self.assertEqual({p for p, s in self.log.live[_decode(k)].items() if s == full},
                             held, k)
            self.assertFalse([s for kind, _, s in self.log.phases[_decode(k)]
                              if kind == "alloc" and s in sizes], k)
        freed = [s for k, _, s in self.log.phases["step 0 / generated"] if k == "free"]
        self.assertEqual(freed.count(full), 2 * LAYERS)
        generated = self.prediction.generated
        self.assertEqual(generated["cache"], "StaticCache")
        self.assertEqual(generated["positions"], positions)
        self.assertGreaterEqual(generated["bytes"], cache_bytes(positions))
        print(f"static: 2 x {LAYERS} tensors of {full} bytes in the prefill; cache "
              f"{generated['bytes']} bytes (with each layer's 8-byte position counter)")

    def test_decode_compiled_as_on_a_gpu(self):
        # transformers compiles a static cache's decode forward (its auto-compile, mode
        # reduce-overhead): decode 1 warms the graph tree up, decode 2 records, the rest replay,
        # allocating only what runs outside the graph (the growing sequences), nothing in the
        # tree's pool (0, 1).
        from predict_cuda_graphs_test import events

        self.assertGreaterEqual(self.prediction.compiled["graphs"], 1)
        allocs = [e for e in events(self.prediction.log) if e.kind == "alloc"]
        by_phase = {k: [e for e in allocs if e.phase == _decode(k)] for k in range(1, NEW)}
        for k in (1, 2):
            self.assertTrue(any(e.pool == (0, 1) for e in by_phase[k]), k)
        for k in range(3, NEW):
            self.assertFalse([e for e in by_phase[k] if e.pool != (0, 0)], k)
            self.assertLess(len(by_phase[k]), len(by_phase[2]), k)


class RecordTest(unittest.TestCase):
    def _analyze(self, log):
        done = subprocess.run([os.environ["FRAGSCOPE_BIN"], "analyze", log, "--gpu",
                               "h100-80gb", "--no-sweep", "--json", "-"],
                              capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        return json.loads(done.stdout)

    def test_record_and_analyze(self):
        prediction = _predict("record", cache="static")
        job = prediction.job
        self.assertEqual((job["mode"], job["batch"], job["context"], job["use_cache"]),
                         ("inference", BATCH, PROMPT + NEW - 1, True))
        self.assertEqual((job["prompt"], job["new_tokens"], job["cache"], job["kv_dtype"]),
                         (PROMPT, NEW, "static", "fp32"))
        report = self._analyze(prediction.log)
        model = report["ranks"][0]["verdict"]["model"]
        read = {a["name"]: (a["value"], a["basis"]) for a in model["assumptions"]}
        self.assertEqual(read["context"], (str(PROMPT + NEW - 1), "recorded"))
        self.assertEqual(read["KV cache"], ("held", "recorded"))

    def test_autocast_caches_fp32_in_llama(self):
        prediction = _predict("autocast", dtype="bf16")
        generated = prediction.generated
        self.assertEqual((generated["key_dtypes"], generated["value_dtypes"]),
                         (["fp32"], ["fp32"]))
        self.assertEqual((prediction.job["autocast"], prediction.job["kv_dtype"]),
                         ("bf16", "fp32"))
        self._analyze(prediction.log)


class KnownValuesTest(unittest.TestCase):
    def test_reads_of_values_made_from_shapes(self):
        import torch
        from torch._subclasses.fake_tensor import DataDependentOutputException

        from fragscope.predictor.capture import capture
        from fragscope.predictor.known_values import KnownValues

        with capture(_log("known")), torch.no_grad(), KnownValues() as known:
            mask = torch.ones(2, 3, dtype=torch.long, device="cuda")
            grown = torch.cat([mask, mask.new_ones((2, 1))], dim=-1)
            self.assertEqual((int(grown.sum()), bool((grown == 1).all())), (8, True))
            grown[0].zero_()  # an in-place op on a view retires the base's value
            with self.assertRaises(DataDependentOutputException):
                int(grown.sum())
            tokens = torch.randint(0, 5, (3,), device="cuda")
            with self.assertRaises(DataDependentOutputException):
                bool(tokens.max() == 0)
            known.assume(tokens, 4)
            self.assertEqual(int(tokens.sum()), 12)
            self.assertIsNone(known.value(torch.zeros(known.limit + 1, device="cuda")))


class CliTest(unittest.TestCase):
    def _cli(self, *args):
        return subprocess.run([sys.executable, "-m", "fragscope", "predict", *args],
                              capture_output=True, text=True)

    def test_generate_implies_inference(self):
        config = os.path.join(tempfile.mkdtemp(), "config.json")
        with open(config, "w") as f:
            json.dump(LLAMA, f)
        log = _log("cli")
        done = self._cli("--config", config, "--seq", "8", "--micro-batch", "1", "--generate",
                         "2", "--dtype", "fp32", "--out", log, "--json")
        self.assertEqual(done.returncode, 0, done.stderr)
        result = json.loads(done.stdout)
        self.assertEqual(result["generated"]["positions"], 8 + 2 - 1)
        self.assertEqual([p["marker"] for p in result["phases"]][1:4],
                         ["step 0 / prefill", "step 0 / decode 1", "step 0 / generated"])

    def test_bad_flags(self):
        base = ["--config", "llama", "--seq", "8", "--micro-batch", "1", "--out", _log("bad")]
        for extra, message in ((["--generate", "2", "--mode", "training"], "inference"),
                               (["--cache", "static"], "--cache goes with --generate"),
                               (["--generate", "0"], "--generate must be positive")):
            done = self._cli(*base, *extra)
            self.assertEqual(done.returncode, 2, (extra, done.stderr))
            self.assertIn(message, done.stderr)


if __name__ == "__main__":
    missing = _missing()
    if missing:
        print(f"skipped: {missing}")
        sys.exit(0)
    unittest.main(verbosity=2)
