"""The Python helper (hooks/python/fragscope) without torch or a GPU.

Run by ctest twice: plainly, with FRAGSCOPE_LIB_DIR and FRAGSCOPE_SIMULATED_DEVICE_BYTES set (the
C ABI then serves a simulated device, so stats/summary/snapshot/mark go through the real library),
and under LD_PRELOAD=libfragscope_preload.so in cache mode (the helper must find the interposer).
"""
import ctypes
import json
import os
import sys
import tempfile
import unittest

import fragscope


class LibraryDiscoveryTest(unittest.TestCase):
    def test_lib_dir_comes_from_the_environment(self):
        self.assertEqual(fragscope.lib_dir(), os.environ["FRAGSCOPE_LIB_DIR"])

    def test_a_wrong_lib_dir_is_named(self):
        saved = os.environ["FRAGSCOPE_LIB_DIR"]
        os.environ["FRAGSCOPE_LIB_DIR"] = "/nonexistent"
        try:
            with self.assertRaisesRegex(FileNotFoundError, "/nonexistent"):
                fragscope.lib_dir()
        finally:
            os.environ["FRAGSCOPE_LIB_DIR"] = saved


@unittest.skipIf(fragscope.preload_mode() is not None, "run without LD_PRELOAD")
class ReplaceModeOnASimulatedDeviceTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.lib = fragscope._library.load(fragscope._library.ALLOC)
        pattern = os.path.join(self.dir, "py.%d.fslog").encode()
        self.assertEqual(self.lib.fragscope_configure(b"", pattern), 0,
                         self.lib.fragscope_last_error())
        fragscope._library.state.mode = "replace"  # what use_allocator() sets once torch is wired

    def test_stats_summary_snapshot_and_marks(self):
        ptr = self.lib.fragscope_malloc(3 << 20, 0, None)
        self.assertTrue(ptr)
        stats = fragscope.stats(0)
        self.assertEqual(list(stats), sorted(stats), "sorted like torch.cuda.memory_stats")
        self.assertEqual(stats["allocation.all.current"], 1)
        self.assertEqual(stats["allocated_bytes.large_pool.current"], 3 << 20)
        self.assertEqual(stats["reserved_bytes.all.current"], 20 << 20)
        self.assertIn("PyTorch CUDA memory summary, device ID 0", fragscope.memory_summary(0))
        segments = fragscope.snapshot(0)
        self.assertEqual(len(segments), 1)
        self.assertEqual(segments[0]["segment_type"], "large")
        self.assertEqual(segments[0]["blocks"][0]["state"], "active_allocated")
        fragscope.mark("step 1 / forward")
        fragscope.reset_peak_stats(0)
        self.lib.fragscope_free(ptr, 0, 0, None)
        self.assertEqual(fragscope.stats(0)["allocation.all.current"], 0)
        fragscope.flush()
        log = os.path.join(self.dir, "py.0.fslog")
        self.assertTrue(os.path.isfile(log))
        with open(log, "rb") as f:
            data = f.read()
        self.assertEqual(data[:8], b"FSLOG\r\n\x1a")
        self.assertIn(b"step 1 / forward", data)

    def test_record_model_now_and_at_the_first_forward(self):
        config = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 2,
                  "vocab_size": 100, "id2label": {"0": "a"}}
        text = fragscope.record_model(config, seq=128, micro_batch=4, optimizer="adamw-fused")
        record = json.loads(text)
        self.assertEqual(record["format"], "fragscope.model/1")
        self.assertNotIn("id2label", record["config"], "only scalar config entries are kept")
        self.assertEqual(record["job"], {"mode": "training", "seq": 128, "micro_batch": 4,
                                         "optimizer": "adamw-fused"})
        with self.assertRaises(TypeError):
            fragscope.record_model(config, colour="red")

        class Module:  # the nn.Module surface record_model uses, without torch
            config = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 2,
                      "vocab_size": 100}

            def register_forward_pre_hook(self, hook, with_kwargs):
                self.hook = hook
                return self

            def remove(self):
                self.hook = None

        class Ids:
            shape = (8, 256)

        written = []
        saved = fragscope.record._write_model
        fragscope.record._write_model = written.append  # the C ABI's part is tested in C++
        try:
            module = Module()
            self.assertIsNone(fragscope.record_model(module))  # waits for the first forward
            self.assertEqual(written, [])
            module.hook(module, (), {"input_ids": Ids()})
        finally:
            fragscope.record._write_model = saved
        self.assertIsNone(module.hook, "the hook removes itself")
        self.assertEqual(json.loads(written[0])["job"],
                         {"mode": "training", "seq": 256, "micro_batch": 8})

    def test_a_large_config_keeps_what_the_estimator_reads(self):
        from fragscope import model_record
        config = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
                  "num_attention_heads": 2, "intermediate_size": 128, "vocab_size": 100}
        config.update({f"extra_{i}": i for i in range(600)})
        record = json.loads(model_record.model_json(config, mode="training"))
        self.assertIn("intermediate_size", record["config"])
        self.assertNotIn("extra_1", record["config"])
        self.assertLessEqual(len(json.dumps(record)), model_record.MAX_BYTES)


@unittest.skipIf(fragscope.preload_mode() is None, "run under LD_PRELOAD")
class PreloadModeTest(unittest.TestCase):
    def test_the_helper_sees_the_interposer(self):
        self.assertEqual(fragscope.preload_mode(), os.environ["FRAGSCOPE_PRELOAD_MODE"])
        stats = fragscope.stats(0)
        self.assertEqual(stats["allocation.all.current"], 0)
        self.assertIn("PyTorch CUDA memory summary", fragscope.memory_summary(0))
        fragscope.mark("no device used yet")
        fragscope.flush()


if __name__ == "__main__":
    sys.exit(unittest.main())
