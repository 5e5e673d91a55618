"""DTensor (FSDP2's sharded parameters, tensor parallelism's) on torch's fake process group inside
a prediction: what it needs so that it runs there as on the GPUs, and allocates as there.
parallel.fake_process_group enters `on_the_fake_group()`.
"""

import contextlib


@contextlib.contextmanager
def on_the_fake_group():
    """Inside: the three below."""
    with metadata_allocates_nothing(), real_mesh_tensors(), meshes_differ_by_their_groups():
        yield


@contextlib.contextmanager
def metadata_allocates_nothing():
    """DTensor learns an op's output metadata by running it on fake tensors of the global shape
    (ShardingPropagator._propagate_tensor_meta_non_cached); on the GPU that allocates nothing."""
    from torch.distributed.tensor._sharding_prop import ShardingPropagator

    from .kernels import untracked

    original = ShardingPropagator._propagate_tensor_meta_non_cached

    def propagate(propagator, op_schema):
        with untracked():
            return original(propagator, op_schema)

    ShardingPropagator._propagate_tensor_meta_non_cached = propagate
    try:
        yield
    finally:
        ShardingPropagator._propagate_tensor_meta_non_cached = original


@contextlib.contextmanager
def real_mesh_tensors():
    """FSDP2 over the "dp" dimension of parameters already split over "tp" joins the two
    dimensions' meshes (DeviceMesh._concatenate), whose rank map is a CPU tensor the mesh reads
    (nonzero): the fake mode would make it data-less, so the join runs without it."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.distributed.device_mesh import DeviceMesh

    original = DeviceMesh.__dict__["_concatenate"]

    def concatenate(device_mesh_list):
        with unset_fake_temporarily():
            return original.__func__(device_mesh_list)

    DeviceMesh._concatenate = staticmethod(concatenate)
    try:
        yield
    finally:
        DeviceMesh._concatenate = original


@contextlib.contextmanager
def meshes_differ_by_their_groups():
    """DTensor caches the output specs of ops by their input specs, per thread (the autograd
    engine's device thread has its own caches) and in C++, and a spec compares its mesh by shape,
    rank map and dimension names only: a later prediction's mesh of the same shape would be given
    an earlier prediction's, whose process groups are destroyed (another rank's group names do not
    resolve: "Could not resolve the process group"). Inside, a mesh also compares by its
    dimensions' process-group names, which a new world of the same rank gives again."""
    from torch.distributed.device_mesh import DeviceMesh

    original_hash, original_eq = DeviceMesh.__hash__, DeviceMesh.__eq__

    def groups(mesh):
        return tuple(getattr(mesh, "_dim_group_names", None) or ())

    def mesh_hash(mesh):
        return hash((original_hash(mesh), groups(mesh)))

    def mesh_eq(mesh, other):
        same = original_eq(mesh, other)
        if same is True and mesh is not other:
            return groups(mesh) == groups(other)
        return same

    DeviceMesh.__hash__, DeviceMesh.__eq__ = mesh_hash, mesh_eq
    try:
        yield
    finally:
        DeviceMesh.__hash__, DeviceMesh.__eq__ = original_hash, original_eq
