"""Mode 1 from Python: fragscope.use_allocator() in a real training loop.

Usage: torch_replace_gpu_test.py ctypes|torch  (one allocator swap per process). Exits 0 with
"skipped" without torch or a CUDA device.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fslog_check  # noqa: E402
import torch_workload  # noqa: E402


def main(via):
    torch = torch_workload.cuda_or_skip()
    import fragscope

    log_dir = tempfile.mkdtemp(prefix="fragscope_replace_")
    pattern = os.path.join(log_dir, "job.%p.%d.fslog")
    fragscope.use_allocator(conf="max_split_size_mb:256,roundup_power2_divisions:4", log=pattern,
                            via=via)
    try:
        fragscope.use_allocator(conf="", log="", via=via)
        raise AssertionError("a second use_allocator must fail")
    except RuntimeError as e:
        assert "initialized" in str(e), e

    losses = torch_workload.train(torch, mark=fragscope.mark)
    assert all(0.0 < loss < 10.0 for loss in losses), losses
    stats = fragscope.stats()
    assert stats["allocation.all.allocated"] > 100, stats
    assert stats["allocated_bytes.all.current"] > 0, stats
    assert stats["max_split_size"] == 256 << 20, stats
    assert list(stats) == sorted(stats)
    assert "PyTorch CUDA memory summary" in fragscope.memory_summary()
    assert any(b["state"] == "active_allocated" for s in fragscope.snapshot() for b in s["blocks"])

    torch.cuda.set_per_process_memory_fraction(0.5)  # reaches fragscope_set_memory_fraction
    if via == "torch":
        try:
            torch.empty(1 << 50, device="cuda")
            raise AssertionError("allocated 1 PiB")
        except torch.OutOfMemoryError as e:
            assert "fragscope" in str(e), e
        assert fragscope.stats()["num_ooms"] == 1
    torch.cuda.empty_cache()  # reaches fragscope_empty_cache
    fragscope.flush()

    summary = fslog_check.counts(fslog_check.only_file(os.path.join(log_dir, "job.*.0.fslog")))
    kinds = summary["kinds"]
    assert kinds["alloc"] == stats["allocation.all.allocated"] or kinds["alloc"] > 100, kinds
    assert kinds.get("segment_free", 0) > 0, kinds
    assert kinds.get("options_change", 0) >= 1, kinds
    assert summary["markers"][:2] == ["step 0", "step 1"], summary["markers"]
    assert "max_split_size_mb:256" in summary["options"], summary["options"]
    if via == "torch":
        assert kinds.get("oom") == 1, kinds
    print(f"ok: replace via {via}: {kinds}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "auto")
