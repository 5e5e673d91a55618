"""fragscope inside a PyTorch job: one or two lines per mode (see hooks/README.md).

    import fragscope
    fragscope.use_allocator(conf="max_split_size_mb:128", log="/tmp/job.%r.%d.fslog")  # replace
    fragscope.observe(log="/tmp/job.%r.%d.fslog")                                      # observe
    torch.cuda.MemPool(fragscope.pool_allocator(log="/tmp/pool.%d.fslog"))              # one pool
    # or run the job under LD_PRELOAD=.../libfragscope_preload.so                      # interpose

    fragscope.mark("step 3 / backward")   # a phase marker in the log, in every mode
    fragscope.stats()                     # torch.cuda.memory_stats() keys, in every mode
    print(fragscope.memory_summary())

    fragscope.predict(make_model, step, log="/tmp/pred.fslog")   # no GPU: predict the job
    fragscope.predict_hf("config.json", "/tmp/pred.fslog", seq=2048, micro_batch=4)
    fragscope.predict_hf(..., parallel="fsdp2", world_size=8, rank=3)  # one rank of FSDP2/DDP

The shared libraries are found in $FRAGSCOPE_LIB_DIR, else inside this package (fragscope/lib/,
where `pip install` puts them), else in a build directory of the source tree (build*/hooks/). No
build step is needed for this module itself; torch is imported only when a function needs it.
"""

from ._library import build_info, lib_dir, preload_mode
from .allocator import pool_allocator, pool_empty_cache, pool_stats, use_allocator
from .memory_stats import memory_summary, reset_peak_stats, snapshot, stats
from .observer import observe
from .record import flush, mark, name_modules, name_roles, record_model


__all__ = [
    "use_allocator",
    "pool_allocator",
    "pool_stats",
    "pool_empty_cache",
    "observe",
    "mark",
    "record_model",
    "flush",
    "stats",
    "memory_summary",
    "snapshot",
    "reset_peak_stats",
    "preload_mode",
    "lib_dir",
    "predict",
    "predict_hf",
    "build_info",
    "name_modules",
    "name_roles",
]


def __getattr__(name):
    if name == "__version__":  # the version of the libraries this module uses
        try:
            info = build_info()
        except FileNotFoundError:
            info = None
        return info["version"] if info else "unknown"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def predict(make_model, step, log, **options):
    """Predicts a job's CUDA allocations on a machine without a GPU (predictor/capture.py)."""
    from .predictor.capture import predict as run

    return run(make_model, step, log, **options)


def predict_hf(config, log, **options):
    """The standard loop of a Hugging Face config, predicted (predictor/hf_loop.py)."""
    from .predictor.hf_loop import predict_hf as run

    return run(config, log, **options)
