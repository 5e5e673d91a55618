"""The predictor's models of what CUDA kernels allocate (hooks/python/fragscope/predict_kernels.py,
predict_reductions.py), on fake tensors, against torch 2.11's CUDA sources and recorded traces.

Run by ctest (tests/predict/CMakeLists.txt, predict.kernels) with PYTHONPATH=hooks/python. Prints
"skipped: ..." and exits 0 without torch.

  - GroupedMmTest: aten._grouped_mm's CUDA kernel (dtypes, output shape and padded strides,
    CUTLASS's argument buffer).
  - ReductionScratchTest: the reduction kernels' staging buffer and semaphores, against the sizes
    recorded on an H200 (tests/data/oracle/gpt2_plain: GPT-2's bias gradients).
"""

import sys
import unittest


def _missing():
    try:
        import torch  # noqa: F401
    except ImportError as e:
        return f"needs torch ({e})"
    return None


class GroupedMmTest(unittest.TestCase):
    def run_kernel(self, gpu, a_shape, b_shape, dtype, offs_groups=None, transpose_b=True):
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode

        from fragscope.predict_device import find_gpu
        from fragscope.predict_kernels import grouped_mm

        with FakeTensorMode():
            a = torch.empty(a_shape, dtype=dtype)
            b = torch.empty(b_shape, dtype=dtype)
            if transpose_b:
                b = b.transpose(-2, -1)
            offs = (torch.empty(offs_groups, dtype=torch.int32)
                    if offs_groups is not None else None)
            return grouped_mm(find_gpu(gpu), (a, b, offs), {})

    def test_fp32_operands_take_the_fallback(self):
        import torch

        # 2d x 3d, the MoE forward: (S, K) x (G, K, N) -> (S, N), fp32, N padded to 16 bytes.
        out, scratch = self.run_kernel("h100-80gb", (128, 64), (4, 30, 64), torch.float32, 4)
        self.assertEqual(out.dtype, torch.float32)
        self.assertEqual(list(out.shape), [128, 30])
        self.assertEqual(list(out.stride()), [32, 1])
        self.assertEqual(scratch, 0)

    def test_fp32_weight_gradient_is_2d_by_2d(self):
        import torch

        # 2d x 2d (the weights' gradient): (K, S) x (S, N) -> (G, K, N).
        out, _ = self.run_kernel("h100-80gb", (64, 128), (128, 40), torch.float32, 4,
                                 transpose_b=False)
        self.assertEqual(list(out.shape), [4, 64, 40])
        self.assertEqual(list(out.stride()), [64 * 40, 40, 1])

    def test_bf16_on_hopper_allocates_cutlass_arguments(self):
        import torch

        out, scratch = self.run_kernel("h100-80gb", (128, 64), (8, 32, 64), torch.bfloat16, 8)
        self.assertIsNone(out)  # the meta function's output is the kernel's
        self.assertEqual(scratch, 8 * 3 * 8 + 8 * 12 + 3 * 8 * 8)
        out, scratch = self.run_kernel("a100-80gb", (128, 64), (8, 32, 64), torch.bfloat16, 8)
        self.assertEqual(scratch, 0)  # the fallback on compute capability 8.0

    def test_what_the_kernel_refuses(self):
        import torch

        with self.assertRaisesRegex(RuntimeError, "Float32, BFloat16 or Float16"):
            self.run_kernel("h100-80gb", (128, 64), (4, 32, 64), torch.float64, 4)
        with self.assertRaisesRegex(RuntimeError, "offsets"):
            self.run_kernel("h100-80gb", (128, 64), (4, 32, 64), torch.float32, None)


class ReductionScratchTest(unittest.TestCase):
    def scratch(self, gpu, shape, dim, dtype=None, transpose=False):
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode

        from fragscope.predict_device import find_gpu
        from fragscope.predict_reductions import scratch

        with FakeTensorMode():
            x = torch.empty(shape, dtype=dtype or torch.bfloat16)
            if transpose:
                x = x.t()
            return scratch(find_gpu(gpu), (x, dim), {})

    def test_bias_gradients_recorded_on_an_h200(self):
        # The sums over 1536 (and 1024) tokens of GPT-2's linear layers' bf16 output gradients.
        self.assertEqual(self.scratch("h200", (1536, 768), [0]), (9437184, 24))
        self.assertEqual(self.scratch("h200", (1536, 2304), [0]), (28311552, 72))
        self.assertEqual(self.scratch("h200", (1536, 3072), [0]), (37748736, 96))
        self.assertEqual(self.scratch("h200", (1024, 768), [0]), (6291456, 24))
        # Batch and sequence reduced together are one reduced dimension.
        self.assertEqual(self.scratch("h200", (4, 384, 768), [0, 1]), (9437184, 24))

    def test_short_reductions_need_no_staging(self):
        self.assertIsNone(self.scratch("h200", (384, 768), [0]))  # 24 values per thread

    def test_reductions_along_the_fastest_dimension_are_not_modeled(self):
        self.assertIsNone(self.scratch("h200", (1536, 768), [1]))
        self.assertIsNone(self.scratch("h200", (1536, 768), []))
        self.assertIsNone(self.scratch("h200", (768, 1536), [0], transpose=True))


if __name__ == "__main__":
    missing = _missing()
    if missing:
        print(f"skipped: {missing}")
        sys.exit(0)
    unittest.main(verbosity=2)
