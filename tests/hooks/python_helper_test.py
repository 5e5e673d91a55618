"""The Python helper (hooks/python/fragscope) without torch or a GPU.

Run by ctest twice: plainly, with FRAGSCOPE_LIB_DIR and FRAGSCOPE_SIMULATED_DEVICE_BYTES set (the
C ABI then serves a simulated device, so stats/summary/snapshot/mark go through the real library),
and under LD_PRELOAD=libfragscope_preload.so in cache mode (the helper must find the interposer).
"""
import ctypes
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
        self.lib = fragscope._load(fragscope._ALLOC)
        pattern = os.path.join(self.dir, "py.%d.fslog").encode()
        self.assertEqual(self.lib.fragscope_configure(b"", pattern), 0,
                         self.lib.fragscope_last_error())
        fragscope._state.mode = "replace"  # what use_allocator() sets once torch is wired

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
