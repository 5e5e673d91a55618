"""fragscope.predict: a job's CUDA allocations, predicted on a machine without a GPU.

    import fragscope
    fragscope.predict(make_model, step, log="/tmp/pred.fslog", steps=2)
    # or, for a Hugging Face config and the standard loop, fragscope.predict_hf(...)

The model and its step run under torch's FakeTensorMode on CUDA tensors (no memory, no weights):
every op dispatches as on the GPU (autocast, the CUDA kernels' meta functions, PyTorch's own
autograd engine on a stand-in device). Each storage that comes into being is allocated from
fragscope's caching allocator on a simulated device, in order, with its exact size and stream, and
freed when its last reference goes; kernels' own scratch memory that is no op output (the cuBLAS
workspaces) is added where the GPU allocates it (kernels.py). The allocator writes a
replace-mode .fslog with segment events and markers, which `fragscope analyze|sweep|verify` read
(`--gpu NAME` or `--capacity` for the target's memory). Design and limits: hooks/README.md.
"""

import contextlib
import ctypes
import os
import weakref

from .. import _library
from . import active, compile as compiled, cuda_graphs, roles
from .context import Contexts, module_paths
from .device import current_stream_handle, find_gpu, simulated_cuda
from .errors import PredictionError

__all__ = ["Prediction", "capture", "predict", "PredictionError"]

# The simulated device of the capture: as large as fragscope simulates (4 TiB), so that a
# prediction records the job's whole stream; the target GPU's capacity is applied by the replay.
CAPTURE_DEVICE_BYTES = 4 << 40


class Phase:
    """From one marker to the next: allocations, and the peaks of allocated and reserved bytes."""

    def __init__(self, marker):
        self.marker = marker
        self.allocations = 0
        self.peak_allocated = 0
        self.peak_reserved = 0

    def __repr__(self):
        return (f"Phase({self.marker!r}, allocations={self.allocations}, "
                f"peak_allocated={self.peak_allocated}, peak_reserved={self.peak_reserved})")


class Prediction:
    """What a capture recorded: the log's path, each phase's figures, the whole run's."""

    def __init__(self, log, gpu):
        self.log = log
        self.gpu = gpu
        self.phases = []
        self.allocations = 0
        self.peak_allocated = 0
        self.peak_reserved = 0
        self.compiled = {}  # what torch.compile compiled, if it ran (compile.py)

    def phase(self, marker):
        """The phase that starts at `marker` (KeyError if none)."""
        for p in self.phases:
            if p.marker == marker:
                return p
        raise KeyError(marker)


class _Session:
    """The bridge to libfragscope_alloc.so on a simulated device: one per capture."""

    generation = 0

    def __init__(self, log, conf, journal=None):
        self.lib = _library.load(_library.ALLOC)
        # If a list: ("alloc", pointer, bytes), ("free", pointer) and ("mark", text), in order.
        self.journal = journal
        c = ctypes
        self.lib.fragscope_simulate.argtypes = [c.c_uint64, c.c_char_p, c.c_char_p]
        self.lib.fragscope_simulate.restype = c.c_int
        if self.lib.fragscope_simulate(CAPTURE_DEVICE_BYTES, (conf or "").encode(),
                                       log.encode()) != 0:
            raise PredictionError(self.lib.fragscope_last_error().decode())
        _Session.generation += 1
        self.generation = _Session.generation
        self.role = roles.TEMPORARIES  # the role of the allocations made now
        self.contexts = Contexts(self.lib)
        self.live = {}  # storage key -> device pointer, while it holds memory
        self.watched = set()  # keys of the CUDA storages seen, whose death frees their memory
        # keys of storages whose address is not a block of their own -> that address: a CUDA
        # graph replay's outputs, and storages freed under their tensors (graph_trees.py)
        self.aliases = {}
        self.carried_peaks = {}  # the job's peaks before the current phase (stats)
        self.allocations = 0
        self.open = True

    def malloc(self, size, stream=0, role=None):
        """A block of `size` bytes on `stream`, of `role` (default: the current role), its alloc
        record naming its context (role, module, op: context.py)."""
        self.lib.fragscope_set_context(
            self.contexts.current(self.role if role is None else role))
        ptr = self.lib.fragscope_malloc(size, 0, stream or None)
        if not ptr:
            raise PredictionError(
                f"fragscope's allocator refused {size} bytes on the simulated device: "
                + self.lib.fragscope_last_error().decode())
        self.allocations += 1
        if self.journal is not None:
            self.journal.append(("alloc", ptr, size))
        return ptr

    def free(self, ptr):
        if self.open and self.generation == _Session.generation:
            self.lib.fragscope_free(ptr, 0, 0, None)
            if self.journal is not None:
                self.journal.append(("free", ptr))

    def track(self, storage, stream=0, size=None, role=None):
        """Allocates a storage seen for the first time (`size` bytes: default its own; `role`:
        default the current one); frees it when it dies."""
        key = storage._cdata
        if key in self.watched:
            return
        size = storage.nbytes() if size is None else size
        self.watched.add(key)
        weakref.finalize(storage, self._storage_died, key)
        if size:
            self.live[key] = self.malloc(size, stream, role)

    def resize(self, storage, size, stream=0):
        """A tracked storage resized to `size` bytes, as resize_bytes_cuda does it: a block of the
        new size from the current stream, then the old block freed; size 0 only frees. FSDP2
        frees and reallocates its unsharded parameters this way (free_storage, alloc_storage)."""
        key = storage._cdata
        old = self.live.pop(key, None)
        if size:
            self.live[key] = self.malloc(size, stream)
        if old is not None:
            self.free(old)

    def tag_storage(self, storage, role, module=None):
        """The live block of a tracked storage is `role` (and `module`'s, when given) from now
        on."""
        ptr = self.live.get(storage._cdata)
        if ptr is not None and self.open and self.generation == _Session.generation:
            context = self.contexts.of(role, module) if module else 0
            self.lib.fragscope_tag_block_context(ptr, 0, role, context)

    def _storage_died(self, key):
        self.watched.discard(key)
        self.aliases.pop(key, None)
        ptr = self.live.pop(key, None)
        if ptr is not None:
            self.free(ptr)

    def mark(self, text):
        self.lib.fragscope_mark(str(text).encode())
        if self.journal is not None:
            self.journal.append(("mark", str(text)))

    def stats(self):
        """The allocator's statistics as torch.cuda reports them to the job: its peaks since the
        job's own last reset_peak_memory_stats, not since the last phase began (inductor's
        autotuning, for one, sizes its argument clones by max_memory_allocated)."""
        stats = self.phase_stats()
        for key, value in self.carried_peaks.items():
            stats[key] = max(stats.get(key, 0), value)
        return stats

    def phase_stats(self):
        """The allocator's statistics, peaks since the phase began."""
        from ..memory_stats import replace_stats

        return replace_stats(0)

    def begin_phase(self):
        """The next phase's peaks start from the memory in use; the job's are carried over."""
        for key, value in self.phase_stats().items():
            if key.endswith(".peak"):
                self.carried_peaks[key] = max(self.carried_peaks.get(key, 0), value)
        self.lib.fragscope_reset_peak_stats(0)

    def reset_peak_stats(self):
        """torch.cuda.reset_peak_memory_stats in the job."""
        self.carried_peaks.clear()
        self.lib.fragscope_reset_peak_stats(0)

    def empty_cache(self):
        self.lib.fragscope_empty_cache()

    def close(self):
        if self.open:
            self.lib.fragscope_set_context(0)  # each allocation set its own; none after
            self.lib.fragscope_flush()
            self.open = False


def _torch_lib():
    import torch

    name = _library.TORCH
    path = os.path.join(_library.lib_dir(), name)
    if not os.path.isfile(path):
        raise PredictionError(f"fragscope.predict needs {name} (build target fragscope_torch)")
    lib = _library.load(name)
    built = lib.fragscope_torch_version().decode()
    if built != torch.__version__.split("+")[0]:
        raise PredictionError(f"{name} was built for torch {built}, this is {torch.__version__}")
    lib.fragscope_torch_predict_begin.restype = ctypes.c_int
    return lib


@contextlib.contextmanager
def capture(log, gpu="h100-80gb", conf=None, journal=None, compile=False):
    """Runs the body on the simulated CUDA device of `gpu`, recording into `log` (an .fslog path),
    and into `journal` (a list) each allocation, free and marker when one is given. torch.compile
    works inside (compile.py): from the start with `compile`, else from its first call.

    Yields (prediction, mark): mark(text) writes a marker and records the statistics there.
    Inside, build the model and run the steps as on the GPU (device="cuda").
    """
    try:
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode
    except ImportError as e:
        raise PredictionError(f"fragscope.predict needs torch: {e}") from e
    from .kernels import Recorder, scaled_dot_product_attention

    target = find_gpu(gpu) if isinstance(gpu, str) else gpu
    torch_lib = _torch_lib()
    session = _Session(log, conf, journal)
    active.session = session
    prediction = Prediction(log, target)

    class _FakeMode(FakeTensorMode):
        # FakeTensorMode puts a no-op CUDA guard in place each time it is entered without a GPU;
        # the prediction's guard goes back on top (Note [Backward without a GPU]).
        # torch.cuda answers "available" during a prediction; the fake mode must still never
        # touch the CUDA runtime (torch.tensor(..., device="cuda") is made on the CPU and lifted).
        avoid_device_init = True

        def __enter__(self):
            mode = super().__enter__()
            torch_lib.fragscope_torch_predict_reinstall_guard()
            return mode

    counted = [0]

    def close_phase():
        if prediction.phases:
            stats = session.phase_stats()
            last = prediction.phases[-1]
            last.allocations = session.allocations - counted[0]
            last.peak_allocated = stats["allocated_bytes.all.peak"]
            last.peak_reserved = stats["reserved_bytes.all.peak"]
            prediction.peak_allocated = max(prediction.peak_allocated, last.peak_allocated)
            prediction.peak_reserved = max(prediction.peak_reserved, last.peak_reserved)
        counted[0] = session.allocations
        session.begin_phase()

    def mark(text):
        close_phase()
        session.mark(text)
        prediction.phases.append(Phase(str(text)))

    # FakeTensor makes a real CUDA tensor once per device when torch.cuda says it is available
    # (which it will, simulated); asked now, while it is not, the cached answer is a no-op.
    from torch._subclasses import fake_tensor

    for device in (torch.device("cuda"), torch.device("cuda", 0)):
        fake_tensor.init_gpu_context(device)
    original_sdpa = torch.nn.functional.scaled_dot_product_attention
    if torch_lib.fragscope_torch_predict_begin() != 0:
        session.close()
        raise PredictionError(torch_lib.fragscope_torch_last_error().decode())
    try:
        functional = torch.nn.functional
        original_sdpa = functional.scaled_dot_product_attention
        functional.scaled_dot_product_attention = scaled_dot_product_attention(target,
                                                                               original_sdpa)
        with simulated_cuda(target, session.stats, session.empty_cache, session.reset_peak_stats):
            fake = _FakeMode(allow_non_fake_inputs=True)
            with fake, _swappable_parameters(fake), _foreach_takes_fake_tensors(), \
                    _resizable_storages(session), Recorder(session, target), \
                    module_paths(session.contexts), \
                    roles.naming_kv_caches(), cuda_graphs.simulated(session), \
                    compiled.on_demand(target, compile, prediction.compiled):
                yield prediction, mark
                import gc

                gc.collect()
    finally:
        active.session = None
        torch.nn.functional.scaled_dot_product_attention = original_sdpa
        torch_lib.fragscope_torch_predict_end()
        close_phase()
        prediction.allocations = session.allocations
        session.close()


@contextlib.contextmanager
def _resizable_storages(session):
    """UntypedStorage.resize_ of a CUDA storage reallocates on the GPU but only changes a fake
    tensor's (meta) storage size, below the dispatcher: the allocator sees it here."""
    import torch

    original = torch.UntypedStorage.resize_

    def resize_(storage, size):
        result = original(storage, size)
        if storage._cdata in session.watched:
            session.resize(storage, int(size), current_stream_handle())
        return result

    torch.UntypedStorage.resize_ = resize_
    try:
        yield
    finally:
        torch.UntypedStorage.resize_ = original


@contextlib.contextmanager
def _swappable_parameters(fake):
    """Module.cuda()/.to() swap fake parameters (torch.utils.swap_tensors), which refuses a tensor
    that the fake mode's converter memoizes (a weak reference); the memo entries go first."""
    import torch

    memo = fake.fake_tensor_converter.meta_converter.tensor_memo
    original = torch.utils.swap_tensors

    def swap_tensors(t1, t2):
        for key in [k for k, v in memo.items() if v is t1 or v is t2]:
            del memo[key]
        return original(t1, t2)

    torch.utils.swap_tensors = swap_tensors
    try:
        yield
    finally:
        torch.utils.swap_tensors = original


@contextlib.contextmanager
def _foreach_takes_fake_tensors():
    """The optimizers' default implementation (foreach on CUDA) and clip_grad_norm_'s are chosen
    by the parameters' type: a fake tensor is not a torch.Tensor there, which would pick the
    single-tensor loops and their allocations instead of the GPU's foreach kernels."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.optim import optimizer
    from torch.utils import _foreach_utils

    lists = (optimizer._foreach_supported_types, _foreach_utils._foreach_supported_types)
    for types in lists:
        types.append(FakeTensor)
    try:
        yield
    finally:
        for types in lists:
            types.remove(FakeTensor)


def predict(make_model, step, log, *, steps=1, gpu="h100-80gb", conf=None, world_size=1, rank=0,
            parallel=None, bucket_cap_mb=None, blocks=None, make_optimizer=None, compile=False):
    """Predicts `steps` calls of step(state, index) after make_model() on the simulated `gpu`.

    make_model() builds the model (and whatever state the steps keep) on device "cuda"; its
    result is passed to each step. Markers "init" and "step N" delimit the phases; a step may
    call fragscope.predictor.capture.current_mark(text) for finer ones. Returns a Prediction.

    Rank `rank` of a job of `world_size` GPUs (parallel.py) runs under torch's fake
    process group. parallel="fsdp2" or "ddp": make_model() returns the nn.Module, which is
    wrapped (fsdp2: fully_shard on each of `blocks`, default the transformer blocks, then on the
    root; ddp: DistributedDataParallel, `bucket_cap_mb`), and the state is the wrapped module, or
    (module, make_optimizer(module)) with `make_optimizer`; under fsdp2 the model is built and
    sharded unrecorded and then its shards allocated, as torchtitan's meta-device initialisation
    (parallel.build). parallel=None with world_size > 1:
    make_model() wraps the model itself (its own fully_shard or DDP calls run on the fake group).
    torch.compile in make_model or step compiles for the target GPU (compile.py); with compile,
    also what was compiled before the prediction began.
    """
    from . import parallel as parallelism

    try:
        rank_job = parallelism.job(parallel, world_size, rank, bucket_cap_mb)
    except ValueError as e:
        raise PredictionError(str(e)) from e
    if make_optimizer is not None and parallel is None:
        raise PredictionError("make_optimizer goes with parallel='fsdp2' or 'ddp'")
    if compile and rank_job is not None:
        raise PredictionError(f"compile with world_size={world_size} is not predicted")
    with capture(log, gpu=gpu, conf=conf, compile=compile) as (prediction, mark):
        global current_mark
        current_mark = mark
        try:
            with contextlib.ExitStack() as stack:
                mesh = None
                if rank_job is not None:
                    mesh = stack.enter_context(parallelism.fake_process_group(rank_job))
                mark("init")
                if rank_job is not None and rank_job.parallel is not None:
                    state = parallelism.build(make_model, rank_job, mesh, blocks)
                    if make_optimizer is not None:
                        state = (state, make_optimizer(state))
                else:
                    state = make_model()
                for index in range(steps):
                    mark(f"step {index}")
                    step(state, index)
                del state
        finally:
            current_mark = _no_mark
    prediction.rank_job = rank_job
    return prediction


def _no_mark(text):
    pass


current_mark = _no_mark
