"""The capture running now (capture.capture sets it; None outside one), for the code that acts on
its session from outside the capture's own calls: the roles, the 4-bit base's loading, the
allocation of models built while nothing was recorded."""

from .device import current_stream_handle

session = None

# Whether compile support is on in the running capture (compile.compilable): the Recorder lets
# torch.compile compile under it only then (kernels.py); otherwise dynamo runs the frames eagerly.
compile_support = False


def track(storage):
    """Inside capture: allocates `storage` (one made while nothing was recorded) on the current
    stream, and frees it when it dies, as if an op had just made it."""
    session.track(storage, current_stream_handle())


def reallocate(storage):
    """Inside capture: a tracked `storage` given a new block of its size on the current stream,
    and its old block freed (torch.utils.swap_tensors of a new tensor into it)."""
    session.resize(storage, storage.nbytes(), current_stream_handle())
