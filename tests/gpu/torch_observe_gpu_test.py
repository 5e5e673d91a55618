"""Mode 2 from Python: fragscope.observe() logs PyTorch's native allocator without changing it.
Exits 0 with "skipped" without torch or a CUDA device."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fslog_check  # noqa: E402
import torch_workload  # noqa: E402


def main():
    torch = torch_workload.cuda_or_skip()
    import fragscope

    log_dir = tempfile.mkdtemp(prefix="fragscope_observe_")
    fragscope.observe(log=os.path.join(log_dir, "job.%p.%d.fslog"))
    torch.cuda.reset_accumulated_memory_stats()
    losses = torch_workload.train(torch, mark=fragscope.mark)
    try:
        torch.empty(1 << 50, device="cuda")
        raise AssertionError("allocated 1 PiB")
    except torch.OutOfMemoryError:
        pass
    torch.cuda.empty_cache()
    stats = fragscope.stats()  # PyTorch's own: observing keeps them working
    fragscope.flush()

    summary = fslog_check.counts(fslog_check.only_file(os.path.join(log_dir, "job.*.0.fslog")))
    kinds = summary["kinds"]
    assert kinds["alloc"] == stats["allocation.all.allocated"], (kinds, stats)
    assert kinds["free_requested"] == stats["allocation.all.freed"], (kinds, stats)
    assert kinds["segment_alloc"] == stats["segment.all.allocated"], (kinds, stats)
    assert kinds.get("segment_free", 0) == stats["segment.all.freed"], (kinds, stats)
    assert summary["alloc_requested_bytes"] == stats["requested_bytes.all.allocated"]
    assert kinds.get("oom") == 1 and stats["num_ooms"] == 1, (kinds, stats)
    assert len(summary["markers"]) == len(losses)
    assert summary["device_total_bytes"] == torch.cuda.get_device_properties(0).total_memory
    print(f"ok: observe: {kinds}")


if __name__ == "__main__":
    main()
