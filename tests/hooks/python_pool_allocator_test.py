"""fragscope as one torch.cuda.MemPool's allocator (fragscope.pool_allocator), with torch on a CPU.

Run by ctest with FRAGSCOPE_LIB_DIR and FRAGSCOPE_SIMULATED_DEVICE_BYTES set: the library then
serves a simulated device, so the calls PyTorch makes for the pool's segments (fragscope_malloc,
fragscope_free) go through the real library. The MemPool itself needs a CUDA device; without one
that test is skipped and says so.
"""
import os
import tempfile
import unittest

try:
    import torch
except ImportError:  # the other Python tests need no torch; this one does
    torch = None

import fragscope


@unittest.skipIf(torch is None, "torch is not installed")
class PoolAllocatorTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp()
        cls.allocator = fragscope.pool_allocator(log=os.path.join(cls.dir, "pool.%d.fslog"))

    def test_returns_the_object_mempool_takes(self):
        self.assertIsInstance(self.allocator, torch._C._cuda_CUDAAllocator)
        # One configuration per process: a second call hands out the same allocator.
        self.assertIsInstance(fragscope.pool_allocator(), torch._C._cuda_CUDAAllocator)

    def test_the_pools_segment_calls_are_logged_and_counted(self):
        lib = fragscope._library.load(fragscope._library.ALLOC)
        # What PyTorch's pool does for a new 20 MiB segment and, later, to free it.
        ptr = lib.fragscope_malloc(20 << 20, 0, None)
        self.assertTrue(ptr)
        stats = fragscope.pool_stats(0)
        self.assertEqual(stats["allocation.all.current"], 1)
        self.assertEqual(stats["reserved_bytes.all.current"], 20 << 20)
        fragscope.mark("pool region")
        lib.fragscope_free(ptr, 20 << 20, 0, None)
        self.assertEqual(fragscope.pool_stats(0)["allocation.all.current"], 0)
        self.assertEqual(fragscope.pool_stats(0)["reserved_bytes.all.current"], 20 << 20)
        fragscope.pool_empty_cache()
        self.assertEqual(fragscope.pool_stats(0)["reserved_bytes.all.current"], 0)
        fragscope.flush()
        self.assertTrue(os.path.isfile(os.path.join(self.dir, "pool.0.fslog")))

    def test_use_allocator_is_refused_beside_it(self):
        # use_allocator needs CUDA uninitialized and then owns every allocation; pool_allocator
        # refuses to add to it. Here only the reverse order is checked without a device.
        saved = fragscope._library.state.mode
        fragscope._library.state.mode = "replace"
        try:
            with self.assertRaisesRegex(RuntimeError, "already makes fragscope"):
                fragscope.pool_allocator()
        finally:
            fragscope._library.state.mode = saved

    def test_a_mempool_routes_one_region_through_fragscope(self):
        if not torch.cuda.is_available():
            self.skipTest("torch.cuda.MemPool needs a CUDA device (torch.cuda.is_available() is "
                          "False); the allocator object and the library path are tested above")
        pool = torch.cuda.MemPool(self.allocator)
        before = fragscope.pool_stats()["reserved_bytes.all.current"]
        with torch.cuda.use_mem_pool(pool):
            x = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
        y = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")  # PyTorch's own
        self.assertGreater(fragscope.pool_stats()["reserved_bytes.all.current"], before)
        del x, y


if __name__ == "__main__":
    unittest.main()
