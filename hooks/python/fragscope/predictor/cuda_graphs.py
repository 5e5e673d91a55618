"""CUDA graphs in a prediction: `torch.cuda.graph`, `torch.cuda.CUDAGraph` and
`torch.cuda.make_graphed_callables` on the simulated device, with the memory PyTorch's caching
allocator gives them; and the standard loop's inference forward captured once and replayed
(`predict_hf(..., cuda_graphs=True)`, `python -m fragscope predict --cuda-graphs`).

On the GPU, CUDAGraph.capture_begin (PyTorch 2.11, aten/src/ATen/cuda/CUDAGraph.cpp) takes the
graph's private pool -- the `pool` passed (graph_pool_handle()'s (0, n), or another graph's
pool(), so that graphs share one), else a fresh (n, 0) -- and calls the allocator's
beginAllocateToPool with a filter accepting the streams capturing into this graph: every request
made on the capture stream until capture_end's endAllocateToPool is served from that pool (best
fit, splits and reuse of blocks freed during the capture inside the pool only). The pool keeps its
segments reserved while a graph uses it; reset() or the graph's deletion calls releasePool, after
which empty_cache frees its free segments. replay() relaunches the recorded kernels on the
capture's addresses and allocates nothing.

In a prediction the body of the capture runs once, under the fake mode, and that run is the
capture: its allocations go to the graph's pool through the C ABI (fragscope_begin_allocate_to_pool,
fragscope_end_allocate_to_pool, fragscope_release_pool: hooks/fragscope_alloc.h), so the log's
alloc records carry the pool id and `fragscope analyze` replays them into that pool. What needs a
GPU is replaced while a prediction runs (simulated(), installed by capture.capture):

  - torch.cuda.CUDAGraph (also torch.cuda.graphs.CUDAGraph, which make_graphed_callables and
    torch.cuda.graph use): CUDAGraph below. The real class's C++ constructor takes the current
    CUDA stream, which needs a CUDA runtime, and its capture calls cudaStreamBeginCapture; the
    stand-in keeps PyTorch's checks and messages (a non-default capture stream, capture_end on
    the capture stream, one capture per instance until reset(), pool() and replay() only after a
    capture) and its pool calls.
  - torch.cuda.graph_pool_handle (and torch.cuda.graphs'): (0, n) counted from 1 per prediction,
    as a fresh process counts them, so that a log does not depend on what the process did before.
  - torch.cuda.is_current_stream_capturing (and torch.cuda.graphs', and
    torch._C._cuda_isCurrentStreamCapturing): True on a stream that is capturing, which the
    optimizers' capture check and nn's SyncBatchNorm read; the real one asks the CUDA runtime.
  - torch.cuda.graph.default_capture_stream: None while the prediction runs (the class makes it
    once, with torch.cuda.Stream(): one from an earlier prediction would carry that prediction's
    stream handle).
  - torch._C._cuda_clearCublasWorkspaces: the workspace blocks freed (cublas.Workspaces.clear).

torch.cuda.graph itself runs unchanged: torch.cuda.synchronize() (a no-op on the simulated
device), gc.collect() only under torch.compiler.config.force_cudagraph_gc (off by default in
2.11), torch.cuda.empty_cache() -- fragscope_empty_cache, which frees the default pool's unsplit
cached segments and those of released pools as PyTorch's does (a pool still used keeps its) --
then its capture stream made current, capture_begin, the body, capture_end.
make_graphed_callables reduces to the same calls (a warm-up on a side stream, then a forward and
a backward graph per callable in one shared pool). The autograd engine runs backward on the
caller's stream (device.py), so a captured backward allocates into the pool too.

Two allocations of capture_begin are not the pool's: before it begins the pool, the default CUDA
generator registers the graph, and the generator's first registered graph makes its graph-safe
seed and offset (an int64 each, on the capture stream, in the default pool: a small segment of
that stream), freed when the last graph registered with it is deleted (not at reset()). A GEMM in
the capture takes a cuBLAS workspace for the capture stream (cublas.py: one per handle and
stream, kept), which lands in the pool and keeps its segment reserved for the process, as
cuBLAS's handle-and-stream map holds it on the GPU, until torch._C._cuda_clearCublasWorkspaces()
frees every workspace (answered here). Both, and the rest, as an H100 logged them for
scripts/gpu/pools_oracle.py's graph-pool job (tests/predict/predict_cuda_graphs_test.py,
RecordedGraphPoolTest).

Not modeled: streams forked from the capture stream (PyTorch's filter accepts every stream
joined to the capture; here only the capture stream), the deferred frees of blocks used on other
streams during a capture (record_stream is not modeled), graph_capture_record_stream_reuse and
torch.cuda.MemPool / use_mem_pool. torch.compile's CUDA graph trees (mode="reduce-overhead") are
graph_trees.py's.
"""

import contextlib
import itertools
import warnings
import weakref

from .device import current_stream_handle, patched_attributes

__all__ = ["CUDAGraph", "GraphedForward", "simulated", "is_current_stream_capturing"]

_CAPTURE_MODES = ("global", "thread_local", "relaxed")
WARM_UP_ITERATIONS = 3  # the PyTorch docs' whole-network example, make_graphed_callables' default


class _GraphSafeRng:
    """A CUDA generator's graph-safe state (CUDAGeneratorState::register_graph): when the first
    graph registers with it -- the default generator at every capture_begin, another generator
    by register_generator_state -- it allocates its seed and offset tensors on the device (one
    int64 each, on the current stream: the capture stream, before the capture's pool is begun,
    so in the default pool), and frees them when the last registered graph is destroyed
    (~CUDAGraph; reset() keeps the registration)."""

    def __init__(self, session):
        self.session = session
        self.graphs = set()  # the tokens of the registered graphs
        self.blocks = []

    def register(self, token, stream):
        from .roles import WORKSPACES

        if not self.graphs:
            self.blocks = [self.session.malloc(8, stream, WORKSPACES) for _ in range(2)]
        self.graphs.add(token)

    def unregister(self, token):
        self.graphs.discard(token)
        if not self.graphs:
            for ptr in self.blocks:
                self.session.free(ptr)
            self.blocks = []


class _Prediction:
    """The CUDA-graph state of one prediction: its allocator session, the pool ids it hands out,
    the streams capturing now and the generators' graph-safe states."""

    def __init__(self, session):
        self.session = session
        self.own_pools = itertools.count(1)  # (n, 0): a capture given no pool
        self.handles = itertools.count(1)  # (0, n): graph_pool_handle()
        self.tokens = itertools.count(1)  # one per CUDAGraph that registered
        self.capturing = {}  # stream handle -> the CUDAGraph capturing on it
        self.rngs = {}  # None (the default CUDA generator) or id(generator) -> _GraphSafeRng
        self.active = True

    def rng(self, generator=None):
        key = None if generator is None else id(generator)
        if key not in self.rngs:
            self.rngs[key] = _GraphSafeRng(self.session)
        return self.rngs[key]

    def live(self):
        """Whether the prediction (and its allocator session) still runs."""
        s = self.session
        return self.active and s.open and s.generation == type(s).generation

    def call(self, function, *args):
        """A pool call of the C ABI on device 0; RuntimeError with the library's message."""
        if function(0, *args) != 0:
            raise RuntimeError(self.session.lib.fragscope_last_error().decode())


_state = None  # the running prediction's _Prediction


def _running():
    if _state is None or not _state.live():
        raise RuntimeError("fragscope.predict: a CUDA graph of a prediction used after it ended")
    return _state


class _Held:
    """What a CUDAGraph holds in its prediction, apart from the object (its finalizer's
    argument): its token, the generator states it registered with, and its pool once captured."""

    def __init__(self, state):
        self.state = state
        self.token = next(state.tokens)
        self.rngs = []
        self.pool = None  # until reset() releases it


def _release_pool(held):
    """releasePool of a graph's pool: nothing once its prediction ended."""
    pool, held.pool = held.pool, None
    if pool is not None and held.state.live():
        try:
            held.state.call(held.state.session.lib.fragscope_release_pool, *pool)
        except RuntimeError as e:  # PyTorch's reset() warns, it runs in a destructor
            warnings.warn(f"fragscope.predict: releasing CUDA graph pool {pool}: {e}")


def _destroyed(held):
    """~CUDAGraph: the generator states unregister it, then reset() releases its pool."""
    if held.state.live():
        for rng in held.rngs:
            rng.unregister(held.token)
    _release_pool(held)


class CUDAGraph:
    """torch.cuda.CUDAGraph on the simulated device (see the module doc): capture_begin and
    capture_end route the capture stream's allocations to the graph's private pool; replay()
    allocates nothing; reset() and the graph's deletion release the pool."""

    def __init__(self, keep_graph=False):
        self.keep_graph = keep_graph
        self._pool = None
        self._stream = None  # the capture stream's handle while capturing
        self._ended = False  # PyTorch's capture_ended_
        self._instantiated = False  # has_graph_exec_
        self._held = None  # from the first registration: what the graph's deletion gives back

    def _holding(self, state):
        if self._held is None:
            self._held = _Held(state)
            weakref.finalize(self, _destroyed, self._held)
        return self._held

    def _register(self, rng, stream):
        held = self._holding(_running())
        if rng not in held.rngs:
            held.rngs.append(rng)
        rng.register(held.token, stream)

    def register_generator_state(self, generator):
        """Another CUDA generator's state registered with this graph (its seed and offset
        tensors allocated if it is the state's first graph)."""
        if is_current_stream_capturing():
            raise RuntimeError("Cannot register the state during capturing stage.")
        self._register(_running().rng(generator), current_stream_handle())

    def capture_begin(self, pool=None, capture_error_mode="global"):
        if capture_error_mode not in _CAPTURE_MODES:
            raise RuntimeError("Unknown capture error mode. Expected `global`, `thread_local`, "
                               f"or `relaxed`, got {capture_error_mode}")
        if self._instantiated:
            raise RuntimeError("This CUDAGraph instance already owns a captured graph. To "
                               "capture a new graph, create a new instance.")
        state = _running()
        stream = current_stream_handle()
        if stream == 0:
            raise RuntimeError("CUDA graphs must be captured on a non-default stream. (However, "
                               "after capture, it's ok to replay them on the default stream.)")
        pool = (0, 0) if pool is None else tuple(int(v) for v in pool)
        # The default generator registers the graph first, before the pool is begun.
        self._register(state.rng(), stream)
        if pool == (0, 0):
            pool = (next(state.own_pools), 0)
        elif pool[0] and pool[1]:  # PyTorch asserts one counter is 0
            raise RuntimeError(f"pool {pool}: a graph's pool has one non-zero counter")
        state.call(state.session.lib.fragscope_begin_allocate_to_pool, *pool, stream)
        self._pool, self._stream = pool, stream
        state.capturing[stream] = self

    def capture_end(self):
        if self._stream is None:
            raise RuntimeError("capture_end() called before capture_begin().")
        if current_stream_handle() != self._stream:
            raise RuntimeError("Capture must end on the same stream it began on.")
        state = _running()
        del state.capturing[self._stream]
        self._stream = None
        state.call(state.session.lib.fragscope_end_allocate_to_pool, *self._pool)
        self._ended = True
        self._instantiated = not self.keep_graph
        self._held.pool = self._pool

    def instantiate(self):
        if not self._ended:
            raise RuntimeError("capture_end() must have been called before calling instantiate")
        if self._instantiated and not self.keep_graph:
            raise RuntimeError("instantiate() is intended to be called by the user only when "
                               "keep_graph=true")
        self._instantiated = True

    def replay(self):
        """The recorded kernels again, on the capture's memory: nothing allocated or freed."""
        if not self._ended:
            raise RuntimeError("Called CUDAGraph::replay without a preceding successful capture.")
        self._instantiated = True

    def reset(self):
        """As PyTorch's: a capture not ended keeps routing (no endAllocateToPool here); an ended
        one's pool is released."""
        if self._stream is not None and _state is not None:
            _state.capturing.pop(self._stream, None)
            self._stream = None
        if self._ended:
            self._ended = False
            _release_pool(self._held)
        self._instantiated = False

    def pool(self):
        if not self._ended:
            raise RuntimeError("Called CUDAGraph::pool() without a preceding successful capture.")
        return self._pool

    def enable_debug_mode(self):
        pass

    def debug_dump(self, debug_path):
        warnings.warn("fragscope.predict: a CUDA graph captured in a prediction has no kernels "
                      f"to dump ({debug_path} not written)")

    def raw_cuda_graph(self):
        raise RuntimeError("fragscope.predict: a CUDA graph captured in a prediction has no "
                           "cudaGraph_t (no kernel ran on a GPU)")

    def raw_cuda_graph_exec(self):
        raise RuntimeError("fragscope.predict: a CUDA graph captured in a prediction has no "
                           "cudaGraphExec_t (no kernel ran on a GPU)")


def is_current_stream_capturing():
    """torch.cuda.is_current_stream_capturing on the simulated device."""
    return _state is not None and current_stream_handle() in _state.capturing


def graph_pool_handle():
    """torch.cuda.graph_pool_handle on the simulated device: (0, n)."""
    return (0, next(_running().handles))


@contextlib.contextmanager
def simulated(session):
    """CUDA graphs on the simulated device of `session` (capture._Session) for the
    block; torch.cuda.graphs is restored after."""
    import torch
    import torch.cuda.graphs as graphs

    global _state
    outer, _state = _state, _Prediction(session)
    patches = [(module, name, value)
               for module in (torch.cuda, graphs)
               for name, value in (("CUDAGraph", CUDAGraph),
                                   ("graph_pool_handle", graph_pool_handle),
                                   ("is_current_stream_capturing", is_current_stream_capturing))]
    patches += [(torch._C, "_cuda_isCurrentStreamCapturing", is_current_stream_capturing),
                (torch._C, "_cuda_clearCublasWorkspaces", session.workspaces.clear),
                (graphs, "_cuda_isCurrentStreamCapturing", is_current_stream_capturing),
                (graphs.graph, "default_capture_stream", None)]
    try:
        with patched_attributes(patches):
            yield
    finally:
        _state.active = False
        _state = outer


class GraphedForward:
    """The standard loop's inference forward as the PyTorch docs capture a whole network: a
    static input of `shape` token ids, `forward(ids)` warmed up WARM_UP_ITERATIONS times on a
    side stream (markers "warm-up K / forward"), then captured once into a fresh private pool
    ("capture / forward"); step(index) replays it ("step N / replay") after copying the step's
    batch in from the host, which allocates nothing on the device, as replay() does not. Each
    warm-up's logits are freed before the next (the loop frees its step's); the captured ones,
    the graph's static output, live in the pool with the graph."""

    def __init__(self, forward, shape, vocab_size, marked):
        import torch

        self.vocab_size = vocab_size
        self.shape = shape
        self.marked = marked
        self.static_ids = torch.randint(0, vocab_size, shape, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for k in range(WARM_UP_ITERATIONS):
                marked(f"warm-up {k} / forward")
                logits = forward(self.static_ids)
                del logits
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        marked("capture / forward")
        with torch.cuda.graph(self.graph):
            self.static_logits = forward(self.static_ids)
        self.pool = self.graph.pool()

    def step(self, index):
        import torch

        self.marked(f"step {index} / replay")
        batch = torch.randint(0, self.vocab_size, self.shape)  # the host's next batch
        self.static_ids.copy_(batch)
        self.graph.replay()


def add_flags(parser):
    """The CLI's --cuda-graphs (python -m fragscope predict)."""
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="inference (--mode inference, --config): the forward warmed up 3 "
                        "times on a side stream, captured once into a CUDA graph's private pool, "
                        "then replayed each step (static input)")


def options(args):
    """predict_hf's keyword arguments for --cuda-graphs; ValueError names a bad combination."""
    if not args.cuda_graphs:
        return {}
    if not args.config:
        raise ValueError("--cuda-graphs goes with --config (a step function captures its own "
                         "graphs with torch.cuda.graph)")
    if args.mode != "inference" or args.generate is not None:
        raise ValueError("--cuda-graphs captures the inference forward: give --mode inference "
                         "(and no --generate)")
    return {"cuda_graphs": True}
