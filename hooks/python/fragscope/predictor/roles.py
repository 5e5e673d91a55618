"""Who holds the memory: the role of every allocation a prediction makes, in its log (the values
are fslog/allocation_role.h's).

An allocation has the capture's current role when it is made (in its context:
context.py, fslog/FORMAT.md "Context records") (`current(role)`:
weights while the model is built, other temporaries during forward and backward, optimizer-step
temporaries during the step; the kernels' scratch and cuBLAS workspaces are workspaces), and
tagged (fslog/FORMAT.md, "Tag records") when its role becomes known later:

  - activations saved for backward: autograd's saved-tensor pack hook sees each tensor it saves
    (`saving_activations()`); a parameter (or a view of one) keeps its role;
  - gradients: each parameter's .grad after backward (`tag_gradients`);
  - optimizer states: every tensor in optimizer.state as soon as the optimizer makes it
    (`tag_states_when_made`), and after each step (`tag_optimizer_states`);
  - KV cache: every tensor a transformers cache layer holds after each update (`naming_kv_caches`),
    unless autograd then saves it for backward (a later tag wins: eager attention saving the key).

So at any moment the live bytes split by role sum to the allocated bytes (`fragscope analyze`
reports them at the demand's peak: analysis/metrics/demand.h).
"""

import contextlib

UNKNOWN = 0
WEIGHTS = 1
GRADIENTS = 2
OPTIMIZER_STATES = 3
OPTIMIZER_TEMPORARIES = 4
SAVED_ACTIVATIONS = 5
TEMPORARIES = 6
WORKSPACES = 7
COMMUNICATION = 8
KV_CACHE = 9

NAMES = {UNKNOWN: "unknown", WEIGHTS: "weights", GRADIENTS: "gradients",
         OPTIMIZER_STATES: "optimizer_states", OPTIMIZER_TEMPORARIES: "optimizer_temporaries",
         SAVED_ACTIVATIONS: "saved_activations", TEMPORARIES: "temporaries",
         WORKSPACES: "workspaces", COMMUNICATION: "communication", KV_CACHE: "kv_cache"}


def _session():
    from . import active

    return active.session


@contextlib.contextmanager
def current(role):
    """Inside capture: allocations made in the block are tagged `role` (unless the code that
    makes them says otherwise)."""
    session = _session()
    if session is None:
        yield
        return
    before = session.role
    session.role = role
    try:
        yield
    finally:
        session.role = before


def _local(t):
    """The tensor that holds memory: a DTensor's local shard, else t."""
    local = getattr(t, "_local_tensor", None)
    return local if local is not None else t


# The module path of each parameter (by id) that name_parameters() named: a parameter's weights,
# gradient and optimizer states are that module's.
_parameter_modules = {}


def name_parameters(model):
    """Inside capture: the model's parameters belong to their modules ("model.layers.0.mlp.
    up_proj"): their weights are tagged so now (they were made before any forward ran, outside
    every module), and their gradients and optimizer states when they are."""
    for name, p in model.named_parameters():
        # A compiled block's wrapper (torch.compile's OptimizedModule) holds the block as
        # `_orig_mod`: the parameter is named as in the model's state dict.
        name = name.replace("._orig_mod.", ".")
        module = name.rpartition(".")[0] or type(model).__name__
        _parameter_modules[id(p)] = module
        tag_tensor(p, WEIGHTS, module)


def tag_tensor(t, role, module=None):
    """Inside capture: the live block of tensor `t`'s storage is `role` from now on (and
    `module`'s, when given)."""
    import torch

    session = _session()
    if session is None or not isinstance(t, torch.Tensor):
        return
    t = _local(t)
    if t.device.type == "cuda":
        session.tag_storage(t.untyped_storage(), role, module)


def tag_gradients_when_made(parameters):
    """Each parameter's .grad is a gradient as soon as autograd has accumulated it (a
    post-accumulate-grad hook): the backward's peak then shows the gradients made so far."""
    for p in parameters:
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(
                lambda param: tag_tensor(param.grad, GRADIENTS, _parameter_modules.get(id(param))))


def tag_gradients(parameters):
    """Each parameter's .grad is a gradient (call after backward: what the hooks of
    tag_gradients_when_made could not see, e.g. a sharded gradient set after them)."""
    for p in parameters:
        if p.grad is not None:
            tag_tensor(p.grad, GRADIENTS, _parameter_modules.get(id(p)))


def tag_optimizer_states(optimizer):
    """Every tensor of `optimizer.state` is an optimizer state (call after the step)."""
    import torch

    if optimizer is None:
        return
    for param, state in optimizer.state.items():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                tag_tensor(value, OPTIMIZER_STATES, _parameter_modules.get(id(param)))


def tag_states_when_made(optimizer):
    """The optimizer's states are optimizer states as soon as it makes them: Adam and AdamW make
    them (lazily, at the first step) in `_init_group`, before the step's arithmetic, whose
    temporaries then stand beside them as optimizer-step temporaries. An optimizer without
    `_init_group` has its states tagged after each step only (tag_optimizer_states)."""
    init_group = getattr(optimizer, "_init_group", None)
    if optimizer is None or init_group is None:
        return

    def tagging_init_group(*args, **kwargs):
        result = init_group(*args, **kwargs)
        tag_optimizer_states(optimizer)
        return result

    optimizer._init_group = tagging_init_group


@contextlib.contextmanager
def saving_activations(parameters=()):
    """Inside capture: what autograd saves for backward in the block is a saved activation,
    except the parameters' own storages (still weights)."""
    import torch

    keep = set()
    for p in parameters:
        keep.add(_local(p).untyped_storage()._cdata)

    def pack(t):
        if isinstance(t, torch.Tensor):
            local = _local(t)
            if local.device.type == "cuda" and local.untyped_storage()._cdata not in keep:
                tag_tensor(local, SAVED_ACTIVATIONS)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield


@contextlib.contextmanager
def naming_kv_caches():
    """Inside: the tensors a transformers cache holds are a KV cache once the cache updated their
    layer (kv_caches.py). A model with transformers' default use_cache=True builds one even in a
    training forward, which holds it until the loss is computed (the forward's end, where
    training peaks): the report names it."""
    from .. import kv_caches

    stop = kv_caches.watch(lambda t: tag_tensor(t, KV_CACHE))
    try:
        yield
    finally:
        if stop is not None:
            stop()
