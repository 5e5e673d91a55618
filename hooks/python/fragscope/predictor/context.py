"""Who holds the memory, beyond the role: the module and the ATen op of every allocation a
prediction makes, as the context its alloc record names (fslog/FORMAT.md, "Context records").

- The module: the innermost module whose forward is running (global forward pre- and post-hooks,
  which add nothing to the autograd graph, so the allocations stay those of the job), named as
  the outermost module's named_modules() names it ("transformer.h.7.attn.c_attn"); the outermost
  module itself by its class ("GPT2LMHeadModel"). In backward, the module whose forward made the
  autograd node that runs (torch._C._current_autograd_node()): each module's forward post-hook
  labels the nodes its outputs were made by that no inner module labelled (a walk of the graph
  that stops at labelled nodes, so every node is labelled once). A recomputation in backward
  (activation checkpointing) runs the forward hooks again, which win.
- The op: the ATen op the prediction's dispatch mode is running ("aten::addmm"); none outside one.
  A custom op implemented in Python names what the ATen ops it runs allocate (pinned_op:
  "bitsandbytes::gemm_4bit").
- Backward: whether an autograd node is running.

A context is interned once per (role, module, op, backward) in Python and in the library
(fragscope_define_context); each allocation sets it (fragscope_set_context) before it is made.
"""

import contextlib

from ..module_names import LABEL, ModuleNames


class Contexts:
    """The context state of one capture session."""

    def __init__(self, lib):
        self.lib = lib  # as fragscope._library.load declares it
        self.ids = {}  # (role, module, op, backward) -> context id
        self.modules = ModuleNames()
        self.op = ""   # the ATen op being dispatched
        self.op_pinned = False  # an outer op names what the ops it runs allocate (pinned_op)

    def current(self, role):
        """The context id of an allocation made now with `role` (0 when the log has none)."""
        import torch

        node = torch._C._current_autograd_node()
        if self.modules.stack:
            module = self.modules.current()
        elif node is not None:
            module = node.metadata.get(LABEL, "")
        else:
            module = ""
        return self.of(role, module, self.op, node is not None)

    def of(self, role, module, op="", backward=False):
        """The id of the context (role, module, op, backward), defined on first use."""
        key = (role, module, op, backward)
        context = self.ids.get(key)
        if context is None:
            context = self.lib.fragscope_define_context(role, module.encode(), op.encode(), None,
                                                        int(backward))
            self.ids[key] = context
        return context


@contextlib.contextmanager
def module_paths(contexts):
    """Inside: `contexts.modules` follows the forward of every module."""
    from torch.nn.modules import module as nn_module

    import torch

    names = contexts.modules

    # Inside a torch.compile'd region the hooks are not traced: its graph's allocations are the
    # compiled module's (compile.py).
    def pre(module, args):
        if not torch.compiler.is_compiling():
            names.enter(module)

    def post(module, args, output):
        if not torch.compiler.is_compiling():
            names.label(output, names.leave(module))

    handles = [nn_module.register_module_forward_pre_hook(pre),
               nn_module.register_module_forward_hook(post, always_call=True)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def op(contexts, name):
    """Inside: allocations are the op `name`'s (unless an enclosing pinned_op names them)."""
    before = contexts.op
    if not contexts.op_pinned:
        contexts.op = name
    try:
        yield
    finally:
        contexts.op = before


@contextlib.contextmanager
def pinned_op(contexts, name):
    """Inside: allocations are the op `name`'s, also those of the ops it runs (an op whose
    Python implementation runs ATen ops: bitsandbytes' CUDA wrappers, bnb.py)."""
    before = contexts.op, contexts.op_pinned
    contexts.op, contexts.op_pinned = name, True
    try:
        yield
    finally:
        contexts.op, contexts.op_pinned = before
