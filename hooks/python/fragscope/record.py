"""What a job adds to the logs of every active mode besides its allocations: phase markers (mark),
the model record (record_model), module and role names (name_modules, name_roles), and flush."""

from ._library import ALLOC, TORCH, load, preload, state


def _write_model(text):
    data = text.encode()
    if state.mode == "replace":
        load(ALLOC).fragscope_record_model(data)
    if state.observing:
        load(TORCH).fragscope_torch_observe_record_model(data)
    process = preload()
    if process is not None:
        process.fragscope_preload_record_model(data)


def record_model(model, *, seq=None, micro_batch=None, mode="training", **job):
    """Records the job's model in every active log, so that `fragscope analyze` compares its
    theoretical footprint with the job's cap without a --model flag.

    model: an nn.Module with a Hugging Face .config, a config object, a dict, or a config.json
    path. seq and micro_batch: the training step's shape (for inference: batch=, context=); when
    both are None and model is an nn.Module, they are read from the first forward's token ids
    (input_ids) and the model is recorded then. Other job keys: dtype, optimizer, attention
    ("sdpa", "eager", "flash"), recompute, activations. Returns the record's JSON text, or None
    when it waits for the first forward.
    """
    from . import model_record

    if seq is None and micro_batch is None and hasattr(model, "register_forward_pre_hook"):
        holder = {}

        def first_forward(module, args, kwargs):
            shape = model_record.shape_from_inputs(args, kwargs)
            holder["handle"].remove()
            batch, length = shape if shape is not None else (None, None)
            shape_keys = ({"seq": length, "micro_batch": batch} if mode == "training" else
                          {"context": length, "batch": batch})
            _write_model(model_record.model_json(module, mode=mode, **shape_keys, **job))

        holder["handle"] = model.register_forward_pre_hook(first_forward, with_kwargs=True)
        model_record.model_json(model, mode=mode, **job)  # errors now, not in the forward
        return None
    text = model_record.model_json(model, mode=mode, seq=seq, micro_batch=micro_batch, **job)
    _write_model(text)
    return text


def name_modules(sites=False):
    """From now on every allocation of the active modes names the module whose forward or
    backward made it, and with sites=True the code line that called it (module_context.py);
    returns a handle whose remove() stops it."""
    from .module_context import name_modules as start

    return start(sites)


def name_roles(model, optimizer=None):
    """The model's parameters named weights, their gradients and the optimizer's states named so
    when made, each of its parameter's module, in the logs of the active modes
    (module_context.py); returns a handle whose remove() stops it."""
    from .module_context import name_roles as start

    return start(model, optimizer)


def mark(text):
    """A phase marker ("step 3 / backward") in the logs of every active mode."""
    data = str(text).encode()
    if state.mode == "replace" or state.pool is not None:
        load(ALLOC).fragscope_mark(data)
    if state.observing:
        load(TORCH).fragscope_torch_observe_mark(data)
    process = preload()
    if process is not None:
        process.fragscope_preload_mark(data)


def flush():
    """Writes every recorded event to the log files now."""
    ok = True
    if state.mode == "replace" or state.pool is not None:
        ok &= load(ALLOC).fragscope_flush() == 0
    if state.observing:
        ok &= load(TORCH).fragscope_torch_observe_flush() == 0
    process = preload()
    if process is not None:
        ok &= process.fragscope_preload_flush() == 0
    if not ok:
        raise OSError("fragscope could not write its log (see stderr)")
