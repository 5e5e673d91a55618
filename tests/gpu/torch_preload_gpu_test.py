"""Mode 3 with PyTorch: the training loop under LD_PRELOAD=libfragscope_preload.so, in observe
mode (PyTorch's caching allocator; the log holds its segments) and in cache mode with
PYTORCH_NO_CUDA_MEMORY_CACHING=1 (fragscope is the cache). Losses must equal those of a plain run.
Exits 0 with "skipped" without torch or a CUDA device."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fslog_check  # noqa: E402
import torch_workload  # noqa: E402


def run(env_extra):
    env = dict(os.environ, **env_extra)
    out = subprocess.run([sys.executable, os.path.join(HERE, "torch_workload.py")], env=env,
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    torch_workload.cuda_or_skip()
    preload = os.path.join(os.environ["FRAGSCOPE_LIB_DIR"], "libfragscope_preload.so")
    log_dir = tempfile.mkdtemp(prefix="fragscope_preload_")
    plain = run({})
    assert plain["preload_mode"] is None

    observed = run({"LD_PRELOAD": preload, "FRAGSCOPE_PRELOAD_MODE": "observe",
                    "FRAGSCOPE_LOG": os.path.join(log_dir, "observe.%p.%d.fslog")})
    assert observed["preload_mode"] == "observe"
    assert observed["losses"] == plain["losses"], (observed["losses"], plain["losses"])
    observe_log = fslog_check.counts(
        fslog_check.only_file(os.path.join(log_dir, "observe.*.0.fslog")))
    # Every PyTorch segment is a cudaMalloc; libraries may add their own.
    assert (observe_log["kinds"]["segment_alloc"] >=
            observed["stats"]["segment.all.allocated"]), observe_log
    assert len(observe_log["markers"]) == 20, observe_log["markers"]

    cached = run({"LD_PRELOAD": preload, "FRAGSCOPE_PRELOAD_MODE": "cache",
                  "PYTORCH_NO_CUDA_MEMORY_CACHING": "1",
                  "FRAGSCOPE_LOG": os.path.join(log_dir, "cache.%p.%d.fslog")})
    assert cached["preload_mode"] == "cache"
    for a, b in zip(cached["losses"], plain["losses"]):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(b)), (cached["losses"], plain["losses"])
    assert cached["stats"]["allocation.all.allocated"] > 100, cached["stats"]
    cache_log = fslog_check.counts(fslog_check.only_file(os.path.join(log_dir, "cache.*.0.fslog")))
    assert cache_log["kinds"]["alloc"] == cached["stats"]["allocation.all.allocated"], cache_log
    print(f"ok: preload observe {observe_log['kinds']}, cache {cache_log['kinds']}")


if __name__ == "__main__":
    main()
