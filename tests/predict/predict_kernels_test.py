"""The predictor's models of what CUDA kernels allocate (hooks/python/fragscope/predictor/:
kernels.py, reductions.py, copy_metadata.py), on fake tensors, against torch 2.11's CUDA sources
and recorded traces.

Run by ctest (tests/predict/CMakeLists.txt, predict.kernels) with PYTHONPATH=hooks/python. Prints
"skipped: ..." and exits 0 without torch.

  - GroupedMmTest: aten._grouped_mm's CUDA kernel (dtypes, output shape and padded strides,
    CUTLASS's argument buffer).
  - ReductionScratchTest: the reduction kernels' staging buffer and semaphores, against the sizes
    recorded on an H200 (tests/data/oracle/gpt2_plain: GPT-2's bias gradients).
  - EmbeddingBackwardTest: embedding_dense_backward's temporaries, against the allocations
    recorded on an H100 (tests/data/gpu/: GPT-2 and a Mistral-like model, 4096 token ids).
  - SdpChoiceTest: the SDPA backend for grouped key/value heads (flash takes them with
    enable_gqa; memory-efficient never does), as sdp_utils' head-count checks decide.
  - CopyMetadataTest: the metadata buffers of the multi-tensor copies around FSDP2's collectives
    (predictor/copy_metadata.py), against the sizes recorded on an H100 at world sizes 4 and 8.
"""

import os
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

        from fragscope.predictor.device import find_gpu
        from fragscope.predictor.kernels import grouped_mm

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

        from fragscope.predictor.device import find_gpu
        from fragscope.predictor.reductions import scratch

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


class EmbeddingBackwardTest(unittest.TestCase):
    def steps(self, n, width, dtype=None, scale_grad_by_freq=False):
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode

        from fragscope.predictor.kernels import embedding_backward_steps

        with FakeTensorMode():
            grad = torch.empty(n, width, dtype=dtype or torch.float32)
            indices = torch.empty(n, dtype=torch.long)
            return embedding_backward_steps(grad, indices, scale_grad_by_freq)

    def recorded_allocations(self, name):
        from logged_allocations import allocations

        log = os.path.join(os.path.dirname(__file__), "..", "data", "gpu", name)
        return [size for _, size in allocations(log)]

    def test_the_h100_traces_allocations_in_order(self):
        from logged_allocations import CUB_TEMPORARIES

        # (log, row width, the output's bytes: vocab x width x 4)
        for name, width, output in (("h100_gpt2_124m_two_steps.fslog", 768, 50257 * 768 * 4),
                                    ("h100_mistral_gqa_two_steps.fslog", 1024, 32000 * 1024 * 4)):
            with self.subTest(name):
                steps = self.steps(4096, width)
                model = [s[2] for s in steps if s[0] == "alloc"]
                recorded = self.recorded_allocations(name)
                end = recorded.index(model[-1])  # the partial sums: (4096 // 10 + 4096) x width x 4
                # cub's temporary storage (the sort's, unique_by_key's, exclusive_sum's) is not
                # modeled.
                seen = [b for b in recorded[:end + 1] if b not in CUB_TEMPORARIES and b != output]
                self.assertEqual(seen[-len(model):], model)
                self.assertEqual(model[-1], 4505 * width * 4)
                self.assertEqual([s[0] for s in steps].count("output"), 1)

    def test_up_to_3072_indices_allocate_only_the_output(self):
        self.assertEqual(self.steps(3072, 768), [("output",)])
        self.assertEqual(len(self.steps(3073, 768)), 14)  # 11 allocations, 2 frees, the output
        # Counting needs the sorted path at any size, and one more tensor.
        self.assertIn(("alloc", "count", 512 * 8), self.steps(512, 768, scale_grad_by_freq=True))

    def test_double_grads_sum_in_double(self):
        import torch

        self.assertEqual(self.steps(4096, 64, torch.float64)[-1], ("alloc", "partial_sums",
                                                                    4505 * 64 * 8))
        self.assertEqual(self.steps(4096, 64, torch.bfloat16)[-1], ("alloc", "partial_sums",
                                                                     4505 * 64 * 4))


class SdpChoiceTest(unittest.TestCase):
    def choice(self, heads_q, heads_kv, enable_gqa, flash=True):
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode

        from fragscope.predictor.device import find_gpu
        from fragscope.predictor.kernels import sdp_choice

        from torch.nn.attention import SDPBackend, sdpa_kernel

        backends = [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
        if flash:
            backends.append(SDPBackend.FLASH_ATTENTION)
        with FakeTensorMode(), sdpa_kernel(backends):
            q = torch.empty(2, heads_q, 128, 64, dtype=torch.bfloat16)
            kv = torch.empty(2, heads_kv, 128, 64, dtype=torch.bfloat16)
            return sdp_choice(find_gpu("h100-80gb"), (q, kv, kv, None, 0.0, True, None,
                                                     enable_gqa), {})

    def test_grouped_heads(self):
        flash, efficient, math = 1, 2, 0
        self.assertEqual(self.choice(16, 16, False), flash)
        self.assertEqual(self.choice(16, 8, True), flash)
        self.assertEqual(self.choice(16, 8, False), math)  # heads differ without enable_gqa
        self.assertEqual(self.choice(16, 6, True), math)  # 6 does not divide 16
        self.assertEqual(self.choice(16, 16, False, flash=False), efficient)
        self.assertEqual(self.choice(16, 8, True, flash=False), math)


class CopyMetadataTest(unittest.TestCase):
    """The metadata buffers of FSDP2's copy-out (split_with_sizes_copy) and copy-in (_chunk_cat)
    for GPT-2 124M under a bf16 / fp32-reduce MixedPrecisionPolicy, against the sizes an H100
    recorded (scripts/gpu/parallel_check.py; tests/data/gpu/h100_fsdp2_gpt2_124m_w4r0.fslog):
    a block (12 tensors) and the root (the embeddings and ln_f) at world sizes 4 and 8."""

    # Shapes of the parameters of a block and of the root, in their order.
    BLOCK = [(768,), (768,), (768, 2304), (2304,), (768, 768), (768,), (768,), (768,),
             (768, 3072), (3072,), (3072, 768), (768,)]
    ROOT = [(50257, 768), (1024, 768), (768,), (768,)]
    # world size: {(shapes, op): bytes recorded}
    RECORDED = {4: {("BLOCK", "copy_out"): 14280, ("ROOT", "copy_out"): 25800,
                    ("BLOCK", "copy_in"): 28320, ("ROOT", "copy_in"): 154080},
                8: {("BLOCK", "copy_out"): 7368, ("ROOT", "copy_out"): 12976,
                    ("BLOCK", "copy_in"): 14480, ("ROOT", "copy_in"): 77160}}

    @staticmethod
    def shard_numel(shape, world):
        rows = -(-shape[0] // world)
        return rows * (shape[1] if len(shape) > 1 else 1)

    def copy_out(self, shapes, world, gpu="h100-80gb"):
        import torch

        from fragscope.predictor.copy_metadata import split_with_sizes_copy_bytes
        from fragscope.predictor.device import find_gpu

        splits = [self.shard_numel(s, world) for s in shapes]
        gathered = torch.empty(world, sum(splits), dtype=torch.bfloat16, device="meta")
        out = [torch.empty(world, n, dtype=torch.bfloat16, device="meta") for n in splits]
        return split_with_sizes_copy_bytes(find_gpu(gpu), gathered, splits, 1, out)

    def copy_in(self, shapes, world):
        import torch

        from fragscope.predictor.copy_metadata import chunk_cat_bytes

        grads = [torch.empty(s, dtype=torch.bfloat16, device="meta") for s in shapes]
        total = sum(self.shard_numel(s, world) for s in shapes)
        out = torch.empty(world, total, dtype=torch.float32, device="meta")
        return chunk_cat_bytes(grads, 0, world, out)

    def test_recorded_sizes(self):
        for world, recorded in self.RECORDED.items():
            for (shapes, op), size in recorded.items():
                with self.subTest(world=world, shapes=shapes, op=op):
                    self.assertEqual(getattr(self, op)(getattr(self, shapes), world), size)

    def test_launch_grid_follows_the_gpu(self):
        # The root's copy-out at world size 4 needs more than twice an H100's resident blocks,
        # so each block copies more per chunk; a GPU with fewer resident threads (compute
        # capability 8.9: 1536 per multiprocessor, 128 multiprocessors) packs a different map.
        self.assertNotEqual(self.copy_out(self.ROOT, 4, "rtx-4090"), self.copy_out(self.ROOT, 4))
        self.assertEqual(self.copy_out(self.BLOCK, 4, "h200"), self.copy_out(self.BLOCK, 4))

    def test_the_ops_that_run_the_kernels(self):
        import torch

        from fragscope.predictor.copy_metadata import metadata_bytes
        from fragscope.predictor.device import find_gpu

        aten, h100 = torch.ops.aten, find_gpu("h100")
        grads = [torch.empty(s, dtype=torch.bfloat16, device="meta") for s in self.BLOCK]
        # The functional op's output is bf16: 1736 blocks of 2 KiB chunks, 6 x 12 + 2 vectors.
        out = aten._chunk_cat.default(grads, 0, 4)
        self.assertEqual(metadata_bytes(h100, aten._chunk_cat.default, (grads, 0, 4), {}, out),
                         8 * (1736 + 6 * 12 + 2))
        fp32 = torch.empty(out.shape, dtype=torch.float32, device="meta")
        self.assertEqual(metadata_bytes(h100, aten._chunk_cat.out, (grads, 0, 4), {"out": fp32},
                                        None), self.copy_in(self.BLOCK, 4))
        gathered = torch.empty(4, 16, dtype=torch.bfloat16, device="meta")
        parts = [torch.empty(4, 8, dtype=torch.bfloat16, device="meta") for _ in range(2)]
        self.assertEqual(metadata_bytes(h100, aten.split_with_sizes_copy.out, (gathered, [8, 8]),
                                        {"dim": 1, "out": parts}, None), 8 * (4 * 2 + 2 + 1))
        self.assertEqual(metadata_bytes(h100, aten.add.Tensor, (gathered, gathered), {},
                                        gathered), 0)

    def test_no_metadata_off_the_fast_paths(self):
        import torch

        from fragscope.predictor.copy_metadata import chunk_cat_bytes, split_with_sizes_copy_bytes
        from fragscope.predictor.device import find_gpu

        gathered = torch.empty(4, 16, dtype=torch.bfloat16, device="meta")
        cast = [torch.empty(4, 8, dtype=torch.float32, device="meta") for _ in range(2)]
        self.assertEqual(split_with_sizes_copy_bytes(find_gpu("h100"), gathered, [8, 8], 1,
                                                     cast), 0)
        strided = torch.empty(8, 16, dtype=torch.bfloat16, device="meta")[:, ::2]
        out = torch.empty(4, 16, dtype=torch.bfloat16, device="meta")
        self.assertEqual(chunk_cat_bytes([strided], 0, 4, out), 0)
        fp16 = torch.empty(8, 8, dtype=torch.float16, device="meta")
        self.assertEqual(chunk_cat_bytes([fp16], 0, 4, torch.empty(4, 16, device="meta")), 0)


if __name__ == "__main__":
    missing = _missing()
    if missing:
        print(f"skipped: {missing}")
        sys.exit(0)
    unittest.main(verbosity=2)
