"""DistributedDataParallel on torch's fake process group and without a GPU, inside a prediction
(parallel.fake_process_group enters `on_the_fake_group()`): what DDP needs there so that it runs,
and allocates, as on the GPUs.
"""

import contextlib

from .device import patched_attributes


@contextlib.contextmanager
def on_the_fake_group():
    """What DistributedDataParallel needs on the fake group and without a GPU; none of it changes
    what the rank allocates:
      - its check that every rank has the same parameter shapes reads data back to the CPU
        (_verify_param_shapes makes its device allocations instead);
      - its Reducer times the first ten iterations with CUDA events, which a machine without a
        GPU refuses: prepare_for_forward (which counts the iteration and so turns the timing on)
        does nothing, and the count stays at zero;
      - its bucket rebuild before the second iteration (buckets in the order the gradients were
        ready, the first 1 MiB by default) writes and reads the bucket indices on the CPU: CPU
        tensors are real there (_RealCpuTensors), its device tensors and new buckets fake;
      - the fake group's allreduce completes a future without a value, which the Reducer rejects:
        a comm hook returns the bucket, as NCCL's in-place allreduce does."""
    from torch._C._distributed_c10d import Reducer
    from torch.nn.parallel import DistributedDataParallel, distributed

    original_init = DistributedDataParallel.__init__

    def init(ddp, *args, **kwargs):
        original_init(ddp, *args, **kwargs)
        ddp.register_comm_hook(None, _allreduce_in_place)

    original_rebuild = Reducer._rebuild_buckets

    def rebuild_buckets(reducer):
        with _RealCpuTensors():
            return original_rebuild(reducer)

    patches = [(distributed, "_verify_param_shape_across_processes", _verify_param_shapes),
               (Reducer, "prepare_for_forward", lambda reducer: None),
               (Reducer, "_rebuild_buckets", rebuild_buckets),
               (DistributedDataParallel, "__init__", init)]
    with patched_attributes(patches):
        yield


def _real_cpu_tensors_mode():
    import torch
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.utils._python_dispatch import TorchDispatchMode

    class RealCpuTensors(TorchDispatchMode):
        """Factory ops that make CPU tensors run without the fake mode, so that C++ code can
        read them back."""

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            device = kwargs.get("device")
            if (torch.Tag.nondeterministic_seeded not in func.tags and not any(
                    isinstance(a, torch.Tensor) for a in args)
                    and (device is None or torch.device(device).type == "cpu")):
                with unset_fake_temporarily():
                    return func(*args, **kwargs)
            return func(*args, **kwargs)

    return RealCpuTensors()


class _RealCpuTensors:
    def __enter__(self):
        self.mode = _real_cpu_tensors_mode()
        self.mode.__enter__()

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


def _allreduce_in_place(state, bucket):
    import torch

    future = torch.futures.Future()
    future.set_result(bucket.buffer())
    return future


def _verify_param_shapes(process_group, tensors, logger=None):
    """DDP's check that every rank has the same parameters (C++ verify_params_across_processes)
    reads its data back to the CPU, which a fake tensor cannot: its device allocations are made
    here as the C++ makes them (an H100 log of DDP at world size 4): the parameter count (one
    int64), one int64 per rank for the all-gathered counts, the shapes (two int64 per dimension,
    broadcast from rank 0) freed at once, then the gathered counts in order and the count."""
    import torch

    if not tensors:
        return
    device = tensors[0].device
    count = torch.empty(1, dtype=torch.long, device=device)
    gathered = [torch.empty(1, dtype=torch.long, device=device)
                for _ in range(process_group.size())]
    shapes = sum(2 * t.dim() for t in tensors)
    if shapes:
        torch.empty(shapes, dtype=torch.long, device=device)
    for i in range(len(gathered)):
        gathered[i] = None
    del count
