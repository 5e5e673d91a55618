"""The names of a job's running modules, and of the autograd nodes their forwards made, as the
module contexts of a real job (module_context.py) and of a prediction (predictor/context.py) name
them: each module as the outermost module's named_modules() names it, each node by the module
whose forward made its output."""

import weakref

LABEL = "fragscope_module"


class ModuleNames:
    """The running modules' names (a stack) and the labels of the autograd nodes they made."""

    def __init__(self):
        self.stack = []  # names of the modules whose forward runs, innermost last
        self.names = weakref.WeakKeyDictionary()  # module -> its name

    def name(self, module):
        """`module`'s name: from the outermost module running when first seen."""
        name = self.names.get(module)
        if name is None:
            if self.stack:
                # A module first seen inside another (not a submodule of the root): its class.
                name = f"{self.stack[-1]}.{type(module).__name__}"
            else:
                root = type(module).__name__
                for child_name, child in module.named_modules():
                    self.names[child] = child_name or root
                name = self.names[module]
        return name

    def enter(self, module):
        self.stack.append(self.name(module))

    def leave(self, module):
        """Pops `module` (its name returned)."""
        return self.stack.pop() if self.stack else self.name(module)

    def current(self):
        """The innermost running module's name, "" outside any."""
        return self.stack[-1] if self.stack else ""

    @staticmethod
    def label(outputs, name, on_label=None):
        """Labels the autograd nodes that made `outputs` (and unlabelled nodes before them) with
        `name`, calling on_label(node, name) for each."""
        import torch
        from torch.utils._pytree import tree_flatten

        stack = [t.grad_fn for t in tree_flatten(outputs)[0]
                 if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        while stack:
            node = stack.pop()
            metadata = node.metadata
            if LABEL in metadata:
                continue
            metadata[LABEL] = name
            if on_label is not None:
                on_label(node, name)
            stack.extend(n for n, _ in node.next_functions if n is not None)
