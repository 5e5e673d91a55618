"""What the functional collectives allocate (torch.distributed._functional_collectives, the ops of
the `_c10d_functional` namespace), which DTensor's redistributions call: tensor parallelism's
all-gathers and reduce-scatters of activations, loss parallelism's all-reduces.

On the GPU each collective op allocates its output through the caching allocator on the current
stream (all_gather_into_tensor: group size x the input; reduce_scatter_tensor: the input / group
size; all_reduce: a copy of the input, reduced in place), and wait_tensor returns that output as
it is. Under the fake process group the op runs its meta function, which makes the same output;
wait_tensor's meta function makes a new tensor (empty_like), which the GPU does not: the Recorder
returns its input instead. A reduce-scatter along another dimension than 0 (the sequence, in
sequence parallelism) first copies its input into dimension-0 chunks (funcol's torch.cat), its send
buffer.

The collectives' outputs and the reduce-scatter's send buffer have the communication role when
made (roles.COMMUNICATION): an all-gather's output that is then used as it is (a gather
along dimension 0, or a view of it) is re-tagged if autograd saves it. FSDP2's and DDP's own
collectives take buffers they allocated themselves (torch.empty) and are not these ops.
"""

import contextlib

NAMESPACE = "_c10d_functional"


def dispatch(session, func, args, kwargs, stream):
    """Runs the functional collective `func` (of NAMESPACE) for the Recorder: its new outputs
    allocated on `stream` with the communication role; wait_tensor returns its input."""
    import torch
    from torch.utils._pytree import tree_flatten

    from .roles import COMMUNICATION

    if func is torch.ops._c10d_functional.wait_tensor.default:
        return torch.ops.aten.alias.default(args[0])
    out = func(*args, **kwargs)
    for t in tree_flatten(out)[0]:
        if isinstance(t, torch.Tensor) and t.device.type == "cuda":
            session.track(t.untyped_storage(), stream, role=COMMUNICATION)
    return out


@contextlib.contextmanager
def send_buffers_are_communication():
    """Inside capture: a reduce-scatter's copy of its input into dimension-0 chunks (funcol's
    reduce_scatter_tensor along another dimension) has the communication role."""
    import torch.distributed._functional_collectives as funcol

    from .roles import COMMUNICATION, current

    original = funcol.reduce_scatter_tensor

    def reduce_scatter_tensor(*args, **kwargs):
        with current(COMMUNICATION):
            return original(*args, **kwargs)

    funcol.reduce_scatter_tensor = reduce_scatter_tensor
    try:
        yield
    finally:
        funcol.reduce_scatter_tensor = original
