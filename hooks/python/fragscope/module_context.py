"""Who holds the memory in a real job: every CUDA allocation named by the module that made it, in
the logs of the active modes (observe; replace and the pool allocator; the interposer), as a
context (fslog/FORMAT.md, "Context records"; the predictor names more: predictor/context.py). Under
the interposer, cache mode's allocations name their module; observe mode logs segments, which
name none, so only its refused requests (oom records) do.

    fragscope.observe(log="/tmp/job_%r.fslog")
    with fragscope.name_modules():        # or: handle = fragscope.name_modules(); handle.remove()
        train()

- Forward: global forward pre- and post-hooks (which add nothing to the autograd graph) set the
  allocating thread's context to the innermost running module, named as the outermost module's
  named_modules() names it ("transformer.h.7.attn.c_attn"; the outermost by its class).
- Backward: each module's post-hook labels the autograd nodes its outputs were made by that no
  inner module labelled (module_names.py) and gives each a pre-hook that sets the
  context of the thread that runs it (the engine's device thread) to that module, in backward; a
  callback queued on the engine clears it when the backward ends.
- With sites=True, the code location that called the module ("train.py:88 in step": the first
  frame outside torch's own files), interned too: a frame walk per module call, off by default.
- Roles by identity (name_roles): the parameters are weights, their .grad gradients, the
  optimizer's states optimizer states, each with its parameter's module (tag records). No op: it
  would cost a dispatch mode per op.

Cost: a Python call per module forward (two) and per autograd node in backward, each a C call into
the active libraries; the log records nothing more than the id in each alloc record (measured:
bench/RESULTS.md, "Observe mode: PyTorch's trace entry by receiver").
"""

from . import kv_caches
from .module_names import ModuleNames


class _Libraries:
    """The active modes' (define, set, tag) calls: each library's writers read their own context."""

    def __init__(self, calls):
        self.calls = calls
        self.ids = {}  # (role, module, backward, site) -> the ids, one per library

    def _ids(self, role, module, backward, site):
        key = (role, module, backward, site)
        ids = self.ids.get(key)
        if ids is None:
            ids = [define(role, module.encode(), None, site.encode() or None, int(backward))
                   for define, _, _ in self.calls]
            self.ids[key] = ids
        return ids

    def set(self, module, backward, site=""):
        for (_, set_context, _), context in zip(self.calls, self._ids(0, module, backward, site)):
            set_context(context)

    def clear(self):
        for _, set_context, _ in self.calls:
            set_context(0)

    def tag(self, ptr, device, role, module):
        for (_, _, tag), context in zip(self.calls, self._ids(role, module, False, "")):
            tag(ptr, device, role, context)


def _active_libraries():
    from . import _library

    calls = []
    process = _library.preload()  # the interposer (LD_PRELOAD), whose logs are not the libraries'
    if process is not None and process.fragscope_preload_mode() != b"off":
        calls.append((process.fragscope_preload_define_context,
                      process.fragscope_preload_set_context,
                      process.fragscope_preload_tag_block_context))
    if _library.state.mode == "replace" or _library.state.pool is not None:
        lib = _library.load(_library.ALLOC)
        calls.append((lib.fragscope_define_context, lib.fragscope_set_context,
                      lib.fragscope_tag_block_context))
    if _library.state.observing:
        lib = _library.load(_library.TORCH)
        calls.append((lib.fragscope_torch_observe_define_context,
                      lib.fragscope_torch_observe_set_context,
                      lib.fragscope_torch_observe_tag_block))
    if not calls:
        raise RuntimeError("fragscope: no mode is active: call fragscope.observe, use_allocator "
                           "or pool_allocator first, or run under LD_PRELOAD="
                           "libfragscope_preload.so")
    return _Libraries(calls)


def _call_site():
    """The first frame outside torch's package, as "file.py:88 in name"; "" when none."""
    import os
    import sys

    import torch

    torch_dir = os.path.dirname(torch.__file__)
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        if not path.startswith(torch_dir) and not path.startswith(os.path.dirname(__file__)):
            return f"{os.path.basename(path)}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return ""


class ModuleContexts:
    """The hooks of name_modules(); `libraries` has set(module, backward, site) and clear()."""

    def __init__(self, libraries, sites=False):
        self.libraries = libraries
        self.names = ModuleNames()
        self.handles = []
        self.clear_queued = False
        self.sites = sites
        self.site_stack = []  # the call sites of the running modules (sites=True)

    def install(self):
        from torch.nn.modules import module as nn_module

        self.handles = [nn_module.register_module_forward_pre_hook(self._pre),
                        nn_module.register_module_forward_hook(self._post, always_call=True)]
        return self

    def remove(self):
        for handle in self.handles:
            handle.remove()
        self.handles = []
        self.libraries.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()

    def _pre(self, module, args):
        self.names.enter(module)
        if self.sites:
            self.site_stack.append(_call_site())
        self.libraries.set(self.names.current(), False, self._site())

    def _post(self, module, args, output):
        name = self.names.leave(module)
        site = self.site_stack.pop() if self.site_stack else ""
        self.names.label(output, name, lambda node, label: self._on_label(node, label, site))
        outer = self.names.current()
        if outer:
            self.libraries.set(outer, False, self._site())
        else:
            self.libraries.clear()

    def _site(self):
        return self.site_stack[-1] if self.site_stack else ""

    def _on_label(self, node, name, site):
        def before(grad_outputs):
            if not self.clear_queued:
                import torch

                self.clear_queued = True
                torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)
            self.libraries.set(name, True, site)

        node.register_prehook(before)

    def _backward_done(self):
        self.clear_queued = False
        self.libraries.clear()


def name_modules(sites=False, libraries=None):
    """From now on, every allocation of the active modes (observe; replace or the pool allocator;
    call after them; the interposer) names the module whose forward or backward made it, and with
    sites=True the code that called that module. Returns a handle: its remove() (or the end of a
    `with` block) stops it. `libraries`: for tests, an object with set(module, backward, site) and
    clear()."""
    return ModuleContexts(libraries or _active_libraries(), sites).install()


# The roles of fslog/allocation_role.h (as predictor/roles.py names them).
_WEIGHTS, _GRADIENTS, _OPTIMIZER_STATES, _KV_CACHE = 1, 2, 3, 9


class _RoleHooks:
    """The hooks of name_roles(), removed by remove()."""

    def __init__(self):
        self.handles = []
        self.stops = []  # functions that end a watch (kv_caches.watch)

    def remove(self):
        for handle in self.handles:
            handle.remove()
        for stop in self.stops:
            stop()
        self.handles, self.stops = [], []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def name_roles(model, optimizer=None, libraries=None, device_type="cuda"):
    """Who holds the memory by identity, in a real job: the model's parameters are weights (tagged
    now), each one's .grad a gradient once autograd accumulates it, and the optimizer's states
    optimizer states after each step, each of its parameter's module ("model.layers.0.mlp.up_proj")
    (tag records with a context, fslog/FORMAT.md), and what a transformers KV cache holds a KV
    cache after each update (kv_caches.py; when transformers is imported). Allocations made in between keep what the log
    says of them (name_modules()). Returns a handle whose remove() stops the later tags.
    `libraries` (an object with tag(ptr, device, role, module)) and `device_type`: for tests."""
    import torch

    libraries = libraries or _active_libraries()
    modules = {}  # id(parameter) -> its module's path

    def tag(tensor, role, module):
        if isinstance(tensor, torch.Tensor) and tensor.device.type == device_type:
            libraries.tag(tensor.untyped_storage().data_ptr(), tensor.device.index or 0, role,
                          module)

    hooks = _RoleHooks()
    for name, p in model.named_parameters():
        module = name.rpartition(".")[0] or type(model).__name__
        modules[id(p)] = module
        tag(p, _WEIGHTS, module)
        if p.requires_grad:
            hooks.handles.append(p.register_post_accumulate_grad_hook(
                lambda param, module=module: tag(param.grad, _GRADIENTS, module)))
    if optimizer is not None:
        def states(opt, args, kwargs):
            for param, state in opt.state.items():
                for value in state.values():
                    tag(value, _OPTIMIZER_STATES, modules.get(id(param), ""))

        hooks.handles.append(optimizer.register_step_post_hook(states))
    stop = kv_caches.watch(lambda t: tag(t, _KV_CACHE, ""))
    if stop is not None:
        hooks.stops.append(stop)
    return hooks
