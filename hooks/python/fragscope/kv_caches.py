"""The KV caches of Hugging Face transformers models, for naming their memory: after each
`Cache.update` (every cache class's: its layers do the work), `on_update(tensor)` is called for
every tensor of the updated layer — a DynamicLayer's keys and values (a new torch.cat of the old
and the new tokens each step), a StaticLayer's (made at its first update, written in place), the
states of other layer kinds. Used by the predictor (predictor/roles.py) and by real jobs
(module_context.name_roles). Nothing is patched in a process that has not imported transformers
(importing it here would cost seconds to jobs that do not use it).
"""

import sys

_callbacks = []  # the active on_update functions, in the order they were added


def _naming_update(update):
    import torch

    # torch.compiler.is_compiling: torch 2.3 and later; before, never compiling here.
    compiling = getattr(torch.compiler, "is_compiling", lambda: False)

    def naming_update(self, key_states, value_states, layer_idx, *args, **kwargs):
        result = update(self, key_states, value_states, layer_idx, *args, **kwargs)
        # Not traced into a torch.compile'd graph (dynamo cannot trace the layer's vars(), and
        # would break the graph there): a compiled region's cache tensors go unnamed.
        if _callbacks and not compiling():
            for value in vars(self.layers[layer_idx]).values():
                if isinstance(value, torch.Tensor):
                    for on_update in list(_callbacks):
                        on_update(value)
        return result

    naming_update.fragscope_original = update
    return naming_update


def watch(on_update):
    """Calls on_update(tensor) for each tensor of each cache layer updated from now on; returns a
    function that stops it (None when transformers is not imported: nothing to watch)."""
    if "transformers" not in sys.modules:
        return None
    from transformers import cache_utils

    if not hasattr(cache_utils.Cache.update, "fragscope_original"):
        cache_utils.Cache.update = _naming_update(cache_utils.Cache.update)
    _callbacks.append(on_update)

    def stop():
        if on_update in _callbacks:
            _callbacks.remove(on_update)
        if not _callbacks and hasattr(cache_utils.Cache.update, "fragscope_original"):
            cache_utils.Cache.update = cache_utils.Cache.update.fragscope_original

    return stop
