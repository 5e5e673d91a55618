"""inductor's Triton kernels in a prediction: each is the CachingAutotuner its generated module
makes (torch/_inductor/runtime/triton_heuristics.py, with the launch configs its heuristics chose
for the target GPU), given one launcher per config that launches nothing, so that Triton never
compiles it and PyTorch's own `run` decides what a launch allocates.

At its first launch, a kernel with several configs times each on the GPU
(autotune_to_one_config, then the fastest is kept), and the timing allocates: per config,
`bench` clones each argument the kernel writes (copy_args_to_cpu_if_needed copies it to host
memory instead when its bytes exceed what the allocator's peak leaves above the memory allocated
now: torch.cuda.max_memory_allocated() - memory_allocated()), and the benchmarker
(InductorBenchmarker.benchmark_gpu, which a process with CUDA uses) runs the kernel once, then
allocates a buffer of the L2 cache's size to flush it between timed calls, runs 5 estimation
calls and up to 100 timed ones (each with its clones, freed when the call returns), and frees the
buffer. How many timed calls run depends on the kernel's measured time (at most 100, fewer for a
slow kernel): here the simulated events measure 0 ms, so 100 -- the count changes no peak, each
clone being freed before the next. An H100 recording of a compiled MLP shows the buffer (50 MiB,
its L2) and the clones in this order, inside the graph tree's pool under reduce-overhead.

Replaced, because they need a GPU: the launchers (no Triton compilation, no launch), Triton's
choice of driver when the generated module loads (triton_helpers.set_driver_to_gpu: the target's
simulated driver is already active), and the benchmarker chosen when inductor was imported
(TritonBenchmarker on a machine without CUDA) by InductorBenchmarker.
"""


class Launcher:
    """A config's launcher, compiled for nothing: its launch does nothing. The attributes are those
    CachingAutotuner reads of a launcher (no register spills known: none skipped)."""

    store_cubin = False
    n_spills = None
    n_regs = None
    shared = None
    cache_hash = None

    def __init__(self, config):
        self.config = config
        self.launches = 0

    def __call__(self, *args, stream, **kwargs):
        self.launches += 1


def load(kernel_name, source_code):
    """async_compile.triton in a prediction: the kernel's CachingAutotuner from its generated
    module, with a Launcher per config."""
    from torch._inductor.codecache import PyCodeCache

    kernel = getattr(PyCodeCache.load(source_code), kernel_name)
    kernel.launchers = [Launcher(config) for config in kernel.configs]
    kernel.precompile_time_taken_ns = 0
    return kernel


def patches():
    """(object, name, value) for what the module doc replaces."""
    from torch._inductor.runtime import benchmarking, triton_heuristics, triton_helpers

    return [(triton_helpers, "set_driver_to_gpu", lambda: None),
            (triton_heuristics, "benchmarker", benchmarking.InductorBenchmarker())]
