"""LoRA and QLoRA predicted (hooks/python/fragscope/predictor/: adapters.py, bnb.py): peft's
adapters on a frozen base, and bitsandbytes' 4-bit base with only its CUDA kernels replaced.

Run by ctest (tests/predict/CMakeLists.txt, predict.adapters) with PYTHONPATH, FRAGSCOPE_LIB_DIR
and FRAGSCOPE_BIN set. Prints "skipped: ..." and exits 0 without torch, transformers, peft,
bitsandbytes or the hooks.

A two-layer Llama (hidden 512, vocab 32000: the weights outweigh the kernels' workspaces),
seq 1024 x micro-batch 2, two steps of AdamW, bf16 autocast; full fine-tuning, LoRA (peft's
default targets) and QLoRA (all-linear, r 8):
  - LoRA's weights are the bf16 base plus the fp32 adapters (and the rotary embedding's fp32
    buffers), to the byte; QLoRA's are the 4-bit
    packing of every linear but the output layer (n/2 packed bytes, n/64 uint8 absmax, the
    double quantization's fp32 absmax per 256 blocks and its 1 KiB code, the fp32 offset and the
    NF4 code) beside the bf16 rest and the adapters;
  - gradients and AdamW's states exist for the adapters only: 4 and 8 bytes per adapter
    parameter (each tensor rounded to 512 bytes, as the allocator rounds it);
  - bitsandbytes' GEMM over 2048 rows dequantizes each 4-bit weight in the forward (its
    fallback past 1536 rows), and the backward dequantizes each one whose input needs a
    gradient: all but the first layer's q, k and v, whose input is the frozen embedding's;
  - the peaks: LoRA under full fine-tuning;
  - `fragscope analyze` reads each log, and the model record names the adapter; the CLI flags.
"""

import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

from prerequisites import missing as _missing

CONFIG = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1376,
          "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4,
          "vocab_size": 32000, "use_cache": False}
SEQ, MICRO_BATCH, RANK = 1024, 2, 8


def _rounded(nbytes):
    return max(512, (nbytes + 511) // 512 * 512)


def _dump(log):
    """(strings, contexts, events) of `log`: strings id -> text, contexts id -> (role, module
    text, op text), events [(kind, fields)] in order (alloc, free_requested, marker)."""
    out = subprocess.run([os.environ["FRAGSCOPE_BIN"], "dump", log, "--bytes"], check=True,
                         capture_output=True, text=True).stdout
    strings, contexts, events = {0: ""}, {}, []
    for line in out.splitlines():
        kind = line.split()[2]
        if kind == "string":
            m = re.search(r"id=(\d+) '(.*)'", line)
            strings[int(m.group(1))] = m.group(2)
        elif kind == "context":
            m = re.search(r"id=(\d+) role=(\w+) module=(\d+) op=(\d+)", line)
            contexts[int(m.group(1))] = (m.group(2), strings[int(m.group(3))],
                                         strings[int(m.group(4))])
        elif kind == "marker":
            events.append(("marker", re.search(r"marker +'(.*)'", line).group(1)))
        elif kind == "alloc":
            m = re.search(r"ptr=(\w+) .*requested=(\d+) .*context=(\d+)", line)
            events.append(("alloc", (m.group(1), int(m.group(2)), contexts[int(m.group(3))])))
        elif kind == "free_requested":
            events.append(("free", re.search(r"ptr=(\w+)", line).group(1)))
    return events


def _weights_made_at_init(events):
    """The requested bytes of the blocks made in "init / weights" that are live at "end"."""
    live, phase = {}, None
    for kind, value in events:
        if kind == "marker":
            phase = value
            if phase == "end":
                return sum(size for made, size in live.values() if made == "init / weights")
        elif kind == "alloc":
            live[value[0]] = (phase, value[1])
        else:
            live.pop(value, None)
    raise AssertionError("no end marker")


def _sizes_by_op(events, phase, op):
    """Counter of the requested sizes allocated in `phase` by `op`."""
    sizes, current = collections.Counter(), None
    for kind, value in events:
        if kind == "marker":
            current = value
        elif kind == "alloc" and current == phase and value[2][2] == op:
            sizes[value[1]] += 1
    return sizes


class AdaptersTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        from fragscope.predictor.hf_loop import predict_hf

        data = dict(CONFIG)
        cfg = AutoConfig.for_model(data.pop("model_type"), **data)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg)
        cls.linears = {name: m for name, m in model.named_modules()
                       if isinstance(m, torch.nn.Linear) and name != "lm_head"}
        cls.params = dict(model.named_parameters())
        # The rotary embedding's fp32 inverse frequencies (buffers), made with the weights.
        cls.buffer_bytes = sum(b.numel() * b.element_size() for b in model.buffers())
        cls.tmp = tempfile.TemporaryDirectory()
        cls.runs = {}
        for name, options in (("full", {}), ("lora", {"lora": True}),
                              ("qlora", {"qlora": True, "lora_targets": "all-linear"})):
            log = os.path.join(cls.tmp.name, f"{name}.fslog")
            prediction = predict_hf(CONFIG, log, seq=SEQ, micro_batch=MICRO_BATCH, steps=2,
                                    lora_rank=RANK, **options)
            analyzed = subprocess.run([os.environ["FRAGSCOPE_BIN"], "analyze", log, "--no-sweep",
                                       "--threads", "1", "--json", "-"], check=True,
                                      capture_output=True, text=True).stdout
            cls.runs[name] = (prediction, json.loads(analyzed)["ranks"][0], _dump(log))
            print(f"{name}: peak allocated {prediction.peak_allocated}, reserved "
                  f"{prediction.peak_reserved}, {prediction.allocations} allocations")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def _adapted(self, targets):
        return {name: m for name, m in self.linears.items() if name.rpartition(".")[2] in targets}

    def _adapter_tensors(self, targets):
        """The numel of each adapter tensor: A (r x in) and B (out x r) per adapted linear."""
        return [n for m in self._adapted(targets).values()
                for n in (RANK * m.in_features, m.out_features * RANK)]

    def _roles_at(self, run, phase):
        return {p["phase"]: p for p in self.runs[run][1]["phases"]}[phase]["roles_at_peak_demand"]

    def test_lora_weights_are_the_bf16_base_and_the_fp32_adapters(self):
        prediction, _, events = self.runs["lora"]
        targets = prediction.adapter["targets"]
        self.assertEqual(targets, ["q_proj", "v_proj"])  # peft's default for a Llama
        self.assertEqual(prediction.adapter["trainable_dtypes"], ["float32"])
        base = sum(2 * p.numel() for p in self.params.values())
        adapters = 4 * sum(self._adapter_tensors(targets))
        self.assertEqual(_weights_made_at_init(events), base + adapters + self.buffer_bytes)

    def test_qlora_base_is_the_4bit_packing(self):
        prediction, _, events = self.runs["qlora"]
        self.assertEqual(prediction.adapter["targets"],
                         ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj",
                          "v_proj"])
        packed = 0
        for m in self.linears.values():
            n = m.in_features * m.out_features
            blocks = n // 64
            # packed NF4, uint8 absmax, fp32 offset, nested fp32 absmax per 256 blocks, the
            # nested 8-bit code (256 fp32) and the NF4 code (16 fp32).
            packed += n // 2 + blocks + 4 + 4 * -(-blocks // 256) + 1024 + 64
        quantized = {f"{name}.weight" for name in self.linears}
        rest = sum(2 * p.numel() for name, p in self.params.items() if name not in quantized)
        adapters = 4 * sum(self._adapter_tensors(prediction.adapter["targets"]))
        dynamic_map = 1024  # bitsandbytes' 8-bit code, kept on the device (name2qmap)
        self.assertEqual(_weights_made_at_init(events),
                         packed + rest + adapters + dynamic_map + self.buffer_bytes)
        self.assertLess(packed, sum(2 * m.weight.numel() for m in self.linears.values()) / 3.5)

    def test_gradients_and_optimizer_states_are_the_adapters_only(self):
        for run in ("lora", "qlora"):
            targets = self.runs[run][0].adapter["targets"]
            adapter_bytes = sum(_rounded(4 * n) for n in self._adapter_tensors(targets))
            roles = self._roles_at(run, "step 1 / optimizer")
            self.assertEqual(roles["gradients"], adapter_bytes, run)
            self.assertEqual(roles["optimizer_states"], 2 * adapter_bytes, run)
            self.assertGreater(self._roles_at(run, "step 1 / forward")["saved_activations"], 0)

    def test_bitsandbytes_dequantizes_each_4bit_weight(self):
        events = self.runs["qlora"][2]
        dequantized = {name: 2 * m.in_features * m.out_features
                       for name, m in self.linears.items()}
        sizes = set(dequantized.values())  # no other allocation of the op has these sizes
        forward = _sizes_by_op(events, "step 0 / forward", "bitsandbytes::gemm_4bit")
        self.assertEqual(collections.Counter({s: n for s, n in forward.items() if s in sizes}),
                         collections.Counter(dequantized.values()))
        # The first layer's q, k and v take the frozen embedding's output: no input gradient.
        needed = [size for name, size in dequantized.items()
                  if not re.fullmatch(r"model\.layers\.0\.self_attn\.[qkv]_proj", name)]
        backward = _sizes_by_op(events, "step 0 / backward", "bitsandbytes::dequantize_4bit")
        self.assertEqual(backward, collections.Counter(needed))

    def test_lora_peaks_below_full_fine_tuning(self):
        full, lora, qlora = (self.runs[r][0].peak_allocated for r in ("full", "lora", "qlora"))
        self.assertLess(lora, full)
        self.assertLess(qlora, full)

    def test_the_record_names_the_adapter(self):
        job = self.runs["lora"][0].job
        self.assertEqual((job["lora_rank"], job["lora_alpha"], job["lora_targets"]),
                         (RANK, 8, "q_proj,v_proj"))
        self.assertEqual(job["weight_dtype"], "bf16")
        self.assertNotIn("quant", job)
        job = self.runs["qlora"][0].job
        self.assertEqual((job["quant"], job["double_quant"]), ("nf4", True))
        self.assertEqual(self.runs["full"][0].job.get("lora_rank"), None)

    def test_the_cli_flags(self):
        config = os.path.join(self.tmp.name, "config.json")
        with open(config, "w") as f:
            json.dump(dict(CONFIG, num_hidden_layers=1), f)
        log = os.path.join(self.tmp.name, "cli.fslog")
        base = [sys.executable, "-m", "fragscope", "predict", "--config", config, "--seq", "64",
                "--micro-batch", "1", "--out", log]
        done = subprocess.run(base + ["--lora", "--lora-rank", "4", "--lora-alpha", "16",
                                      "--lora-targets", "q_proj,o_proj", "--json"],
                              capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        adapter = json.loads(done.stdout)["adapter"]
        self.assertEqual((adapter["kind"], adapter["rank"], adapter["alpha"], adapter["targets"]),
                         ("lora", 4, 16, ["o_proj", "q_proj"]))
        usage = subprocess.run(base + ["--lora-rank", "4"], capture_output=True, text=True)
        self.assertEqual(usage.returncode, 2)
        self.assertIn("go with --lora or --qlora", usage.stderr)


if __name__ == "__main__":
    reason = _missing("peft", "bitsandbytes")
    if reason:
        print(f"skipped: {reason}")
        sys.exit(0)
    unittest.main()
