"""torch.compile (inductor) in a prediction: PyTorch compiles, the generated code runs on fake
tensors, and only what needs a GPU is replaced.

Dynamo traces the user's model or function, AOTAutograd partitions the joint graph (its min-cut
decides what the compiled forward saves for backward), inductor schedules, fuses and generates
its Python wrapper for the simulated CUDA device (device.py answers its questions) as on the
target GPU. The Recorder (kernels.py) says ignore_compile_internals, so dynamo compiles under it
(it skips a frame under any other mode) with the mode off while it traces and compiles, and on
while the compiled code runs: the wrapper's `empty_strided_cuda` calls, extern kernels
(`extern_kernels.mm(..., out=buf)`, the ATen fallbacks) and `del bufN` are the allocations and
frees the caching allocator sees, in the wrapper's order, its buffer reuse (`buf3 = buf0; del
buf0  # reuse`) inductor's own. Inductor's workspaces (a kernel's `workspace` argument, the
semaphores of cooperative and split reductions) are `empty_strided_cuda` lines as well.

Replaced, because they need a GPU (`compilable`):
  - the wrapper's `empty_strided_cuda` (C++ that allocates from the CUDA caching allocator
    directly) by torch.empty_strided on "cuda" (the same bytes: the fake mode and the Recorder
    see it), `reinterpret_tensor` (C++ that builds a TensorImpl a fake tensor cannot be) by
    as_strided on the same storage, `assert_alignment` (a device pointer's) by a no-op, and
    `get_raw_stream` by the simulated stream's handle;
  - each Triton kernel (`async_compile.triton`): the CachingAutotuner of its generated module
    with launchers that launch nothing, never compiled by Triton (autotune.py: what its first
    launch's timing of several configs allocates is PyTorch's own code). A launch allocates
    nothing else from the caching allocator except Triton's global scratch for kernels that
    need one (its size known only from the compiled kernel: not modeled; inductor's pointwise
    and reduction kernels need none);
  - Triton's active driver (its NVIDIA driver loads libcuda) by the target's
    (SimulatedTritonDriver), dynamo's CudaInterface by the simulated torch.cuda, a fake CUDA
    tensor's data_ptr() by its block's address in the simulated allocator (inductor's
    input-alignment check reads it; graph_trees.py);
  - what compilation computes on the device for real: make_fx's constant propagation of
    one-element tensors (off: each stays a graph node, a block of at most 512 bytes per call
    where the GPU would hold a constant) and inductor's uniform-value constant folding (computed
    on the CPU, the same values).
The SDPA backend is chosen as in eager (kernels.sdp_choice, a constant to dynamo), so the
chosen kernel's op is traced into the graph and runs as an ATen fallback.
No compile-time benchmark runs: max_autotune and coordinate-descent tuning stay off, compiled
graphs are not cached (fx_graph_cache, the autograd cache) so that each prediction compiles for
its own target GPU, and compilation runs in this process (compile_threads=1). pad_mm, which
would time a padded against an unpadded GEMM on the device for an unaligned operand, is off:
assumed not to pad. Mode "reduce-overhead" runs inductor's CUDA graph trees (graph_trees.py).
"""

import contextlib

from . import active as running, autotune, graph_trees
from .device import current_stream_handle
from .errors import PredictionError

# torch.compile's modes the prediction runs: max-autotune benchmarks candidate kernels on the
# device.
MODES = ("default", "reduce-overhead")


def check_mode(mode):
    """PredictionError naming an unsupported torch.compile mode."""
    if mode not in MODES:
        raise PredictionError(
            f"compile mode {mode!r} is not predicted (only {', '.join(MODES)}): "
            "max-autotune benchmarks kernels on the GPU")


def _empty_strided_cuda(size, stride, dtype):
    import torch

    return torch.empty_strided(size, stride, dtype=dtype, device="cuda")


def _reinterpret_tensor(t, size, stride, offset_increment=0):
    return t.as_strided(size, stride, t.storage_offset() + offset_increment)


def _no_alignment_check(*args, **kwargs):
    pass


def _on_the_cpu(run):
    """inductor's UniformValueConstantFolder.run (fx_passes/joint_graph.py), which computes the
    graph's constant values for real while it compiles, with each CUDA device of an op's
    arguments made the CPU: the same values, no device; the folder puts each value back as a
    `full` of the node's own device."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_map

    def cpu(a):
        if isinstance(a, torch.device) and a.type == "cuda":
            return torch.device("cpu")
        if isinstance(a, str) and a.startswith("cuda"):
            return "cpu"
        return a

    class OnTheCpu(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*tree_map(cpu, tuple(args)), **tree_map(cpu, dict(kwargs or {})))

    def folded(self, *args, **kwargs):
        with OnTheCpu():
            return run(self, *args, **kwargs)

    return folded


def _raw_stream(device=None):
    return current_stream_handle()


# Shared memory per block (opt-in), the figure Triton's driver reports to inductor's heuristics:
# 227 KiB on compute capability 9.0, 163 KiB on 8.0, 99 KiB on 8.6 and 8.9 (CUDA's tables).
_MAX_SHARED_MEMORY = {(9, 0): 232448, (8, 0): 166912, (8, 6): 101376, (8, 9): 101376}


class SimulatedTritonDriver:
    """Triton's active driver as the target GPU's: the target (backend, arch, warp size) that
    inductor's kernel hashes and heuristics ask for, device properties, the current device and
    stream; Triton's own NVIDIA driver loads libcuda on construction."""

    def __init__(self, gpu):
        from triton.backends.compiler import GPUTarget

        self.gpu = gpu
        major, minor = gpu.capability
        self.target = GPUTarget("cuda", major * 10 + minor, 32)
        properties = {"max_shared_mem": _MAX_SHARED_MEMORY.get(gpu.capability, 101376),
                      "max_num_regs": 65536, "multiprocessor_count": gpu.multiprocessors,
                      "warpSize": 32, "sm_clock_rate": 0, "mem_clock_rate": 0,
                      "mem_bus_width": 0}
        self.utils = type("Utils", (), {"get_device_properties":
                                        staticmethod(lambda device=0: dict(properties))})()

    def is_active(self):
        return True

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return 0

    def set_current_device(self, device):
        pass

    def get_current_stream(self, device=None):
        return current_stream_handle()

    def get_device_interface(self):
        import torch

        return torch.cuda


@contextlib.contextmanager
def _patched(patches):
    """Sets each (object, name, value) for the block; a class's own attribute (a staticmethod,
    a property) is put back as it was defined, an inherited one removed again."""
    missing = object()
    saved = [(obj, name, vars(obj).get(name, missing) if isinstance(obj, type)
              else getattr(obj, name)) for obj, name, _ in patches]
    try:
        for obj, name, value in patches:
            setattr(obj, name, value)
        yield
    finally:
        for obj, name, value in reversed(saved):
            if value is missing:
                delattr(obj, name)
            else:
                setattr(obj, name, value)


# The names of dynamo's CudaInterface (device_interface.py) bound to torch.cuda's functions when
# it was imported; during a prediction they answer as the simulated device's do.
_INTERFACE = ("current_device", "set_device", "device_count", "stream", "current_stream",
              "set_stream", "synchronize", "get_device_properties", "memory_allocated",
              "is_bf16_supported")


def _delegate(name):
    import torch

    return staticmethod(lambda *args, **kwargs: getattr(torch.cuda, name)(*args, **kwargs))


def _summary(counters):
    """What dynamo compiled, from its counters: graphs, graph breaks and their first reasons (a
    graph break of the prediction is one of the real job only where the same code breaks)."""
    breaks = counters["graph_break"]
    return {"graphs": counters["stats"].get("unique_graphs", 0),
            "graph_breaks": sum(breaks.values()),
            "graph_break_reasons": [str(reason).splitlines()[0][:200] for reason in breaks][:5]}


@contextlib.contextmanager
def compilable(gpu, summary=None):
    """Inside capture: torch.compile compiles for the simulated device of `gpu` and its generated
    code runs on fake tensors (see the module doc); `summary` (a dict) is given what dynamo
    compiled (_summary) at the end."""
    import torch
    import torch._dynamo
    import torch._inductor.config as inductor_config
    import torch.utils._triton as torch_triton
    from torch._dynamo.device_interface import CudaInterface
    from torch._dynamo.utils import counters
    from torch._functorch import config as functorch_config
    from torch._inductor import async_compile
    from torch._inductor.fx_passes.joint_graph import UniformValueConstantFolder
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental import proxy_tensor

    try:
        from triton.runtime.driver import driver as triton_driver
    except ImportError as e:
        raise PredictionError(f"torch.compile in a prediction needs triton: {e}") from e

    def triton(self, kernel_name, source_code, device_str="cuda"):
        return autotune.load(kernel_name, source_code)

    guards = torch._C._dynamo.guards
    patches = [(CudaInterface, name, _delegate(name)) for name in _INTERFACE] + [
        (CudaInterface, "get_raw_stream", staticmethod(_raw_stream)),
        (CudaInterface, "exchange_device", staticmethod(lambda device: 0)),
        (CudaInterface, "maybe_exchange_device", staticmethod(lambda device: 0)),
        (guards, "_empty_strided_cuda", _empty_strided_cuda),
        (guards, "_reinterpret_tensor", _reinterpret_tensor),
        (guards, "assert_alignment", _no_alignment_check),
        (torch._C, "_cuda_getCurrentRawStream", _raw_stream),
        (torch.cuda, "_exchange_device", lambda device: 0),
        (torch.cuda, "_maybe_exchange_device", lambda device: 0),
        (async_compile.AsyncCompile, "triton", triton),
        # The fake modes compilation makes of its own (inductor's pattern tracing, AOTAutograd's)
        # must not run a CUDA op for real either, as the capture's own (capture.py).
        (FakeTensorMode, "avoid_device_init", True),
        (triton_driver, "_active", SimulatedTritonDriver(gpu)),
        # make_fx computes ops on constant tensors of at most one element for real while it
        # traces, on their device (a KV cache's torch.tensor([], device="cuda")): none is
        # computed, each stays a node of the graph.
        (proxy_tensor, "CONSTANT_NUMEL_LIMIT", -1),
        (UniformValueConstantFolder, "run", _on_the_cpu(UniformValueConstantFolder.run)),
    ] + graph_trees.patches(running.session) + autotune.patches()
    settings = {
        "fx_graph_cache": False, "fx_graph_remote_cache": False, "autotune_local_cache": False,
        "compile_threads": 1, "max_autotune": False, "max_autotune_gemm": False,
        "max_autotune_pointwise": False, "coordinate_descent_tuning": False,
        "benchmark_kernel": False, "benchmark_fusion": False, "triton.cudagraphs": False,
        # pad_mm times a padded against an unpadded GEMM on the device when an operand's
        # dimension is not aligned: assumed not padded (the pass off).
        "shape_padding": False,
        **graph_trees.SETTINGS,
    }
    with _patched(patches), inductor_config.patch(settings), \
            functorch_config.patch(enable_autograd_cache=False):
        # Nothing compiled for another device or prediction is reused, nor the Triton backend
        # of another target.
        torch._dynamo.reset()
        counters.clear()
        caches = (torch_triton.triton_backend, torch_triton.triton_hash_with_backend)
        for cached in caches:
            cached.cache_clear()
        running.compile_support = True
        try:
            yield
        finally:
            running.compile_support = False
            if summary is not None:
                summary.update(_summary(counters))
            torch._dynamo.reset()
            for cached in caches:
                cached.cache_clear()


@contextlib.contextmanager
def on_demand(gpu, now=False, summary=None):
    """Inside capture: compile support (compilable) from the start when `now`, else from the
    first torch.compile call (importing dynamo's and inductor's compiler costs seconds, which a
    prediction without compile does not pay). A function compiled before the capture began
    compiles only with `now` (fragscope.predict's compile=True); otherwise it runs eagerly.
    `summary` (a dict) is given what dynamo compiled, if support was on."""
    import torch

    with contextlib.ExitStack() as stack:
        if now:
            stack.enter_context(compilable(gpu, summary))
            yield
            return
        original = torch.compile

        def compile(*args, **kwargs):
            if not running.compile_support:
                stack.enter_context(compilable(gpu, summary))
            return original(*args, **kwargs)

        torch.compile = compile
        try:
            yield
        finally:
            torch.compile = original


def check_job(mode="default", **others):
    """PredictionError naming the first setting torch.compile is not predicted with: `others`
    maps a setting's name (as the CLI or predict_hf spells it) to whether it is on, or for
    "parallel"/"--parallel" to the layout (None, "fsdp2", "ddp"): FSDP2 is predicted with each
    block compiled (block_compile.py), DDP is refused with its reason. Gradient checkpointing
    is refused: AOTAutograd's functionalization of the RNG of a recomputed region clones the
    CUDA generator's state (torch.cuda.default_generators, empty without a GPU)."""
    from .block_compile import REFUSED

    check_mode(mode)
    for name, on in others.items():
        if name.lstrip("-") == "parallel":
            if on in (None, False, "fsdp2"):
                continue
            reason = REFUSED.get(on)
            name = f"{name} {on}" if name.startswith("--") else f"{name}={on!r}"
        else:
            reason = REFUSED.get(name.lstrip("-"))
        if on:
            raise PredictionError(f"compile with {name} is not predicted"
                                  + (f": {reason}" if reason else ""))


def add_flags(parser):
    """The CLI's --compile and --compile-mode (python -m fragscope predict)."""
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile (inductor): with --config the model compiled as "
                        "`model = torch.compile(model)`; with --step-fn compile support from the "
                        "start for what the functions compile")
    parser.add_argument("--compile-mode", choices=["default", "reduce-overhead", "max-autotune",
                                                   "max-autotune-no-cudagraphs"],
                        help="torch.compile's mode (default and reduce-overhead are predicted)")


def options(args):
    """predict_hf's or predict's keyword arguments for --compile; ValueError names a bad
    combination."""
    if not args.compile:
        if args.compile_mode is not None:
            raise ValueError("--compile-mode goes with --compile")
        return {}
    mode = args.compile_mode or "default"
    try:
        check_job(mode, **{"--pp": getattr(args, "pp", 1) not in (None, 1),
                           "--cuda-graphs": getattr(args, "cuda_graphs", False),
                           "--generate": args.generate is not None,
                           "--parallel": getattr(args, "parallel", None),
                           "--ep": getattr(args, "ep", 1) not in (None, 1),
                           "--cp": getattr(args, "cp", 1) not in (None, 1),
                           "--lora": getattr(args, "lora", False),
                           "--qlora": getattr(args, "qlora", False),
                           "--recompute": getattr(args, "recompute", False)})
    except PredictionError as e:
        raise ValueError(str(e).replace("compile with", "--compile with")
                         .replace("compile mode", "--compile-mode")) from e
    if not args.config and (getattr(args, "parallel", None) or getattr(args, "tp", 1) > 1):
        # The standard loop compiles each transformer block before fully_shard
        # (block_compile.py); a model function of one's own compiles what it wants itself.
        raise ValueError("--compile with --parallel goes with --config (each transformer block "
                         "compiled before fully_shard); a --model-fn compiles its own modules")
    return {"compile": True} if not args.config else {"compile": True, "compile_mode": mode}
