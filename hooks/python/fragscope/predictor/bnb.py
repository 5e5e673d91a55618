"""QLoRA's 4-bit base in a prediction: bitsandbytes' own code with only its CUDA kernels replaced.

What runs is bitsandbytes' (0.50) and transformers' real code: transformers' 4-bit quantizer
chooses the linears to replace (every nn.Linear but the output embedding and tied weights) and
replaces them with `bnb.nn.Linear4bit`; `Params4bit._quantize` quantizes each weight with
`bnb.functional.quantize_4bit`; `Linear4bit.forward` and `MatMul4Bit` run the forward and
backward; and each `torch.ops.bitsandbytes` op runs the Python wrapper of bitsandbytes' CUDA
backend (bitsandbytes/backends/cuda/ops.py), which allocates the outputs and any scratch with
torch (recorded as every other allocation) and picks the GEMM's path (its fused kernel, or the
dequantized weight and F.linear) from the shapes and the target GPU's properties. Only the C
kernels (`lib.c...`, called with the tensors' pointers) are no-ops here (`_NoKernels`), and
the raw stream is 0: a fake tensor holds no data, and the kernels allocate nothing through the
caching allocator.

Three things differ from a GPU process, each without changing an allocation:
  - a `Params4bit` cannot wrap a fake tensor (`Tensor._make_subclass`), so each quantized weight
    is a frozen `nn.Parameter` of the packed tensor that carries Params4bit's attributes
    (quant_state, blocksize, quant_type, ...), quantized by `Params4bit._quantize` itself;
  - `create_dynamic_map` (the 8-bit code of double quantization) reads values (`.tolist()`), so
    it runs on real CPU tensors; its copy on the GPU (`name2qmap`, 1 KiB) is made as on the GPU;
  - bitsandbytes' caches of the device's properties and the GEMM path's choice are cleared before
    and after, so that each prediction answers for its own GPU.

Loading (`load_4bit`), as `from_pretrained(quantization_config=BitsAndBytesConfig(...))` loads a
checkpoint: the model is built with nothing recorded, the quantizer replaces its linears, and
then each parameter is materialised in the model's order: a linear's weight arrives in the
model's dtype and is quantized on the device (its 16-bit copy freed after), the rest (embeddings,
norms, the output layer, biases) stay in the model's dtype.
"""

import contextlib
import warnings

from .errors import PredictionError


def missing():
    """Why QLoRA cannot be predicted here (bitsandbytes not installed), or None."""
    try:
        import bitsandbytes  # noqa: F401
    except ImportError as e:
        return f"QLoRA needs bitsandbytes ({e}): pip install bitsandbytes==0.50.2"
    return None


@contextlib.contextmanager
def quiet_import():
    """Inside: importing bitsandbytes (itself, or through peft) does not warn that its CPU
    backend lacks an optional kernel package (a prediction runs its CUDA backend's wrappers, not
    the CPU kernels)."""
    import logging

    logger = logging.getLogger("bitsandbytes")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def import_quietly():
    """bitsandbytes and its CUDA backend's wrappers, imported quietly (quiet_import)."""
    with quiet_import():
        import bitsandbytes
        import bitsandbytes.backends.cuda.ops  # noqa: F401  (the wrappers this module runs)
    return bitsandbytes


class _NoKernels:
    """bitsandbytes' native library in a prediction: every kernel a no-op."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


@contextlib.contextmanager
def kernels():
    """Inside capture: each bitsandbytes op runs its CUDA backend's Python wrapper on the fake
    tensors (a dispatch mode above the recorder), with the C kernels no-ops; the patches and
    caches are restored and cleared on exit."""
    import torch
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.utils._python_dispatch import TorchDispatchMode

    from . import active
    from .context import pinned_op

    bnb = import_quietly()
    functional = bnb.functional
    cuda_ops = bnb.backends.cuda.ops
    cuda = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)

    class Wrappers(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func.namespace != "bitsandbytes":
                return func(*args, **kwargs)
            contexts = active.session.contexts
            with warnings.catch_warnings(), pinned_op(contexts, func._schema.name):
                # The wrappers pass data_ptr()s to the (no-op) kernels.
                warnings.filterwarnings("ignore", "Accessing the data pointer of FakeTensor")
                return func.redispatch(cuda, *args, **kwargs)

    create_dynamic_map = functional.create_dynamic_map

    def dynamic_map(*args, **kwargs):
        # Real values on the CPU (the model is built under torch.device("cuda")).
        with unset_fake_temporarily(), torch.device("cpu"):
            return create_dynamic_map(*args, **kwargs)

    patches = [(cuda_ops, "lib", _NoKernels()), (cuda_ops, "_get_raw_stream", lambda index: 0),
               (cuda_ops, "_cuda_device_of", lambda tensor: contextlib.nullcontext()),
               (functional, "create_dynamic_map", dynamic_map)]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]

    def clear():
        functional.name2qmap.clear()
        cuda_ops._gpu_dispatch_props.cache_clear()
        cuda_ops._gemm_4bit_use_custom_cuda.cache_clear()

    clear()
    for owner, name, value in patches:
        setattr(owner, name, value)
    try:
        with Wrappers():
            yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)
        clear()


def quantization_config(compute_dtype, double_quant=True):
    """QLoRA's BitsAndBytesConfig: NF4, double quantization, compute in the model's dtype."""
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                              bnb_4bit_use_double_quant=double_quant,
                              bnb_4bit_compute_dtype=compute_dtype)


def load_4bit(build, dtype, double_quant=True):
    """build() (a transformers model on the simulated device) loaded in 4 bits: see the module
    doc. Inside capture and kernels(); returns the model, its quantizer attached as
    from_pretrained attaches it (`is_loaded_in_4bit`, `hf_quantizer`)."""
    import torch
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from transformers.quantizers import AutoHfQuantizer

    from .active import track
    from .kernels import untracked

    bnb = import_quietly()
    with untracked():
        model = build()
    quantizer = AutoHfQuantizer.from_config(quantization_config(dtype, double_quant),
                                            pre_quantized=False)
    # The quantizer makes its Linear4bit modules on the meta device: real meta tensors (a
    # Params4bit cannot wrap a fake one), replaced below.
    with unset_fake_temporarily():
        quantizer.preprocess_model(model, device_map={"": 0})
    quantized = 0
    for module in model.modules():
        for name, old in list(module._parameters.items()):
            if old is None:
                continue
            if isinstance(module, bnb.nn.Linear4bit) and name == "weight":
                module._parameters[name] = _quantized(bnb, old, dtype)
                quantized += 1
            elif old.device.type == "meta":  # a Linear4bit's bias
                value = torch.empty(old.shape, dtype=dtype, device="cuda")
                module._parameters[name] = torch.nn.Parameter(value, requires_grad=False)
            else:
                track(old.untyped_storage())
        for value in module._buffers.values():
            if value is not None:
                track(value.untyped_storage())
    if not quantized:
        raise PredictionError("qlora: the model has no nn.Linear that transformers' 4-bit "
                              "quantizer replaces")
    quantizer.postprocess_model(model)
    model.hf_quantizer = quantizer
    return model


def _quantized(bnb, old, dtype):
    """A Linear4bit's weight as it arrives (in `dtype`) and is quantized on the device by
    Params4bit._quantize: the packed weight, a frozen parameter with Params4bit's attributes."""
    import torch

    value = torch.empty(old.shape, dtype=dtype, device="cuda")
    weight = torch.nn.Parameter(value, requires_grad=False)
    del value
    for key, item in old.__dict__.items():
        setattr(weight, key, item)
    bnb.nn.Params4bit._quantize(weight, "cuda")
    return weight


def quant_state_tensors(model):
    """(module path, tensor) of every quantized weight's quant state: its absmax (uint8 with
    double quantization, else fp32), offset, code and nested state's absmax and code."""
    import torch

    for path, module in model.named_modules():
        state = getattr(getattr(module, "weight", None), "quant_state", None)
        if state is None:
            continue
        for owner in (state, state.state2):
            for value in vars(owner).values() if owner is not None else ():
                if isinstance(value, torch.Tensor):
                    yield path, value
