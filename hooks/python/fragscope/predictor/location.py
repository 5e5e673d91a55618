"""Where a predicted step is: the nn.Module running and the ATen op being dispatched, so that a
refused model names the module and the op where the prediction failed, and an assumption (a
random branch: random_branches.py) names the module that made it.

The module stack is kept by global forward pre- and post-hooks (every module's __call__, the
model's and any other); module paths are the names of `model.named_modules()` once the model is
built. The op is caught by a dispatch mode on top of the capture's modes: the first op an
exception passes through (the innermost) is written onto the exception (`fragscope_op`,
`fragscope_modules`, `fragscope_backward`), with the module stack of that moment, or in backward
the autograd node that ran it (no module's forward runs there).
"""

import contextlib

from .errors import PredictionError


class Location:
    """The module stack of the running forward and the names of the model's modules."""

    def __init__(self):
        self.stack = []  # modules whose forward is running, outermost first
        self.names = {}  # id(module) -> (module, its path in the model)

    def name_modules(self, model):
        """Names each module of `model` by its path (`model.layers.0.self_attn`, as its
        state_dict's keys; the model itself "the model")."""
        for name, module in model.named_modules():
            self.names[id(module)] = (module, name or "the model")

    def describe(self, module):
        """`path (Class)` of a module, or its class alone when it is not the model's."""
        entry = self.names.get(id(module))
        cls = type(module).__name__
        return f"{entry[1]} ({cls})" if entry is not None and entry[0] is module else cls

    def innermost(self):
        """The innermost running module, or None."""
        return self.stack[-1] if self.stack else None

    def modules_text(self, stack=None):
        """The innermost running module and, when it is not the model's, the nearest that is."""
        stack = self.stack if stack is None else stack
        if not stack:
            return None
        text = self.describe(stack[-1])
        if id(stack[-1]) not in self.names:
            named = next((m for m in reversed(stack) if id(m) in self.names), None)
            if named is not None:
                text += f" in {self.describe(named)}"
        return text

    def _pre(self, module, args):
        import torch

        if not torch.compiler.is_compiling():  # not traced into a compiled graph
            self.stack.append(module)

    def _post(self, module, args, output):
        import torch

        if torch.compiler.is_compiling():
            return
        # A forward that raised and was caught inside the model left its entries above: drop
        # them with it.
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i] is module:
                del self.stack[i:]
                break

    @contextlib.contextmanager
    def watching(self):
        """Keeps the module stack (global forward hooks) and records the failing op of every
        exception raised in the body."""
        from torch.nn.modules import module as nn_module

        pre = nn_module.register_module_forward_pre_hook(self._pre)
        post = nn_module.register_module_forward_hook(self._post)
        try:
            with _op_site(self):
                yield self
        finally:
            pre.remove()
            post.remove()


def _op_site_mode():
    from torch.utils._python_dispatch import TorchDispatchMode

    class OpSite(TorchDispatchMode):
        """Writes the op and module stack onto the first exception that passes an op."""

        def __init__(self, location):
            super().__init__()
            self.location = location

        @classmethod
        def ignore_compile_internals(cls):
            # torch.compile runs with this mode on (dynamo skips a frame under any other mode);
            # the compiled code's ops come through it (compile.py).
            return True

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if any(hasattr(t, "__tensor_flatten__") for t in types):
                # A tensor subclass that wraps others (DTensor) runs its ops on its local
                # tensors, which come back through this mode.
                return NotImplemented
            try:
                return func(*args, **(kwargs or {}))
            except Exception as e:
                if getattr(e, "fragscope_op", None) is None:
                    _mark(e, func, self.location)
                raise

    return OpSite


def _mark(error, func, location):
    import torch

    backward = None
    if torch._C._current_graph_task_id() != -1:
        node = torch._C._current_autograd_node()
        backward = node.name() if node is not None else "backward"
    try:
        error.fragscope_op = str(func)
        error.fragscope_modules = location.modules_text()
        error.fragscope_backward = backward
    except AttributeError:
        pass  # an exception type without attributes: the message names the phase alone


def _op_site(location):
    return _op_site_mode()(location)


def failure(error, location, phase):
    """A PredictionError for an exception of the step: the phase (the last marker), the module
    and the ATen op where it was raised, and the error itself."""
    where = [f"in {phase}"] if phase else []
    chain, seen = error, set()
    op = modules = backward = None
    while chain is not None and id(chain) not in seen:  # the op may be on a wrapped cause
        seen.add(id(chain))
        op = op or getattr(chain, "fragscope_op", None)
        modules = modules or getattr(chain, "fragscope_modules", None)
        backward = backward or getattr(chain, "fragscope_backward", None)
        chain = chain.__cause__ or chain.__context__
    modules = modules or location.modules_text()
    if backward:
        where.append(f"backward node {backward}")
    elif modules:
        where.append(f"module {modules}")
    if op:
        where.append(f"op {op}")
    message = str(error).strip().splitlines()
    first = message[0] if message else ""
    return PredictionError(f"the prediction failed {', '.join(where)}: {type(error).__name__}: "
                           f"{first}")
