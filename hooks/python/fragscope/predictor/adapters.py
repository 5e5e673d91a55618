"""LoRA and QLoRA in the standard loop: predict_hf(..., lora=True | qlora=True, lora_rank=R,
lora_alpha=A, lora_targets=..., lora_dropout=P), `python -m fragscope predict --lora | --qlora`.

The adapters are peft's own: `get_peft_model(model, LoraConfig(r, lora_alpha, target_modules,
lora_dropout, task_type="CAUSAL_LM"))` runs on the model built on the simulated device, so what
exists is what peft makes on a GPU: the base frozen (requires_grad off: no gradient, no optimizer
state), each adapted linear wrapped with A (r x in) and B (out x r), made on the CPU, moved to
the base weight's device and dtype, and cast to fp32 when the base is 16-bit (peft's
autocast_adapter_dtype); the optimizer is built over the trainable parameters only, as peft's
users build it. What autograd saves follows from the frozen base: a frozen linear saves no input
for a weight gradient, while its adapter's A saves the same input for its own.

The base is loaded as LoRA users load it, in the step's dtype (`--dtype`: bf16 or fp16, fp32
without autocast; `torch_dtype=` in from_pretrained), and the step runs under autocast as the
standard loop does. QLoRA loads it as `from_pretrained(quantization_config=BitsAndBytesConfig(
load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
bnb_4bit_compute_dtype=<dtype>))` does (bnb.py), without
`prepare_model_for_kbit_training` (which would cast the rest of the base to fp32 and turn on
gradient checkpointing: `--recompute` gives the latter).

Targets: a list of module names (`q_proj,v_proj`), "all-linear" (peft: every linear but the
output layer), or None for peft's default for the model type (q_proj and v_proj for a Llama).
"""

import contextlib

from .errors import PredictionError

PEFT_VERSION = "0.21.2"


class Adapter:
    """One job's adapter: kind "lora" or "qlora", rank, alpha, targets, dropout."""

    def __init__(self, kind, rank, alpha, targets, dropout):
        self.kind = kind
        self.rank = rank
        self.alpha = alpha
        self.targets = targets
        self.dropout = dropout
        self.used = None  # after attach(): the module names peft adapted, and the counts

    def running(self):
        """The context a prediction of this adapter runs in (QLoRA: bitsandbytes' kernels)."""
        if self.kind != "qlora":
            return contextlib.nullcontext()
        from . import bnb

        return bnb.kernels()

    def load(self, build, dtype):
        """The base model of build(**from_config options) in `dtype` (QLoRA: in 4 bits)."""
        if self.kind == "qlora":
            from . import bnb

            return bnb.load_4bit(lambda: build(dtype=dtype), dtype)
        return build(dtype=dtype)

    def attach(self, model):
        """peft's LoRA on `model` (the PeftModel returned); its quant state's tensors tagged as
        their module's weights."""
        from peft import LoraConfig, get_peft_model

        from . import roles

        config = LoraConfig(r=self.rank, lora_alpha=self.alpha, target_modules=self.targets,
                            lora_dropout=self.dropout, task_type="CAUSAL_LM")
        try:
            model = get_peft_model(model, config)
        except ValueError as e:  # no default targets for the model type, or none matched
            raise PredictionError(f"{self.kind}: {e}") from e
        if self.kind == "qlora":
            from . import bnb

            for path, tensor in bnb.quant_state_tensors(model):
                roles.tag_tensor(tensor, roles.WEIGHTS, path)
        targets = model.peft_config["default"].target_modules
        trainable = [p for p in model.parameters() if p.requires_grad]
        # The adapted modules' own names ("q_proj"; peft may list whole paths).
        names = [targets] if isinstance(targets, str) else targets
        self.used = {"targets": sorted({name.rpartition(".")[2] for name in names}),
                     "trainable_params": sum(p.numel() for p in trainable),
                     "trainable_dtypes": sorted({str(p.dtype).replace("torch.", "")
                                                 for p in trainable})}
        return model

    def job_keys(self, dtype_name):
        """The model record's adapter keys (model_record.py); the targets once attached."""
        keys = {"lora_rank": self.rank, "lora_alpha": self.alpha,
                "lora_dropout": self.dropout or None, "weight_dtype": dtype_name}
        if self.used is not None:
            keys["lora_targets"] = ",".join(self.used["targets"])
        if self.kind == "qlora":
            keys.update(quant="nf4", double_quant=True)
        return keys

    def summary(self):
        """What the prediction's result and `--json` say of the adapter."""
        out = {"kind": self.kind, "rank": self.rank, "alpha": self.alpha,
               "dropout": self.dropout}
        if self.kind == "qlora":
            out.update(quant="nf4", double_quant=True)
        return dict(out, **(self.used or {}))


def describe(summary):
    """An Adapter's summary() in one line: "LoRA r=8 alpha=16 on q_proj,v_proj: 1,048,576
    trainable parameters (float32)"."""
    name = {"lora": "LoRA", "qlora": "QLoRA (NF4 base, double quantization)"}[summary["kind"]]
    text = f"{name} r={summary['rank']} alpha={summary['alpha']}"
    if "targets" in summary:
        text += (f" on {','.join(summary['targets'])}: {summary['trainable_params']:,} "
                 f"trainable parameters ({'/'.join(summary['trainable_dtypes'])})")
    return text


def attaching(make_model, adapter, location, job, dtype_name):
    """make_model() with `adapter` attached to the model it returns (after gradient
    checkpointing, as users call get_peft_model): the PeftModel's modules named for failures
    (location.py) and the adapter's keys added to the recorded `job` (a dict)."""

    def make():
        model = adapter.attach(make_model())
        location.name_modules(model)
        job.update({k: v for k, v in adapter.job_keys(dtype_name).items() if v is not None})
        return model

    return make


def adapter(lora=False, qlora=False, rank=8, alpha=None, targets=None, dropout=0.0):
    """The Adapter of predict_hf's keyword arguments, or None without lora/qlora;
    PredictionError names a bad value or a missing package."""
    if not (lora or qlora):
        return None
    kind = "qlora" if qlora else "lora"
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise PredictionError(f"lora_rank must be a positive integer, not {rank!r}")
    alpha = 8 if alpha is None else alpha  # peft's default
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha <= 0:
        raise PredictionError(f"lora_alpha must be a positive number, not {alpha!r}")
    if not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise PredictionError(f"lora_dropout must be in [0, 1), not {dropout!r}")
    reason = missing(kind)
    if reason:
        raise PredictionError(reason)
    return Adapter(kind, rank, alpha, parse_targets(targets), float(dropout))


def parse_targets(targets):
    """None (peft's default for the model type), "all-linear", or a list of module names from a
    list or a comma-separated string."""
    if targets is None or targets == "all-linear":
        return targets
    names = targets.split(",") if isinstance(targets, str) else list(targets)
    names = [n.strip() for n in names if n.strip()]
    if not names:
        raise PredictionError("lora_targets: no module names given")
    return names


def missing(kind="lora"):
    """Why `kind` cannot be predicted here (peft, or for QLoRA bitsandbytes, missing), or None."""
    from .bnb import quiet_import

    try:
        with quiet_import():  # peft imports bitsandbytes when it is installed
            import peft  # noqa: F401
    except ImportError as e:
        return f"{kind} needs peft ({e}): pip install peft=={PEFT_VERSION}"
    if kind == "qlora":
        from . import bnb

        return bnb.missing()
    return None


def add_flags(p):
    """The adapter flags of `python -m fragscope predict`."""
    group = p.add_mutually_exclusive_group()
    group.add_argument("--lora", action="store_true",
                       help="LoRA through peft: the base frozen in --dtype, fp32 adapters trained")
    group.add_argument("--qlora", action="store_true",
                       help="QLoRA: --lora over a base loaded in 4 bits by bitsandbytes (NF4, "
                       "double quantization)")
    p.add_argument("--lora-rank", type=int, default=8, metavar="R", help="adapter rank (8)")
    p.add_argument("--lora-alpha", type=float, metavar="A", help="adapter alpha (peft's: 8)")
    p.add_argument("--lora-targets", metavar="NAMES",
                   help="q_proj,v_proj or all-linear (default: peft's for the model type)")
    p.add_argument("--lora-dropout", type=float, default=0.0, metavar="P",
                   help="dropout before the adapters (peft's default 0)")


def options(args):
    """predict_hf's keyword arguments for the adapter flags; ValueError names a bad flag."""
    if not (args.lora or args.qlora):
        if args.lora_targets or args.lora_alpha is not None or args.lora_rank != 8 \
                or args.lora_dropout:
            raise ValueError("--lora-rank, --lora-alpha, --lora-targets and --lora-dropout go "
                             "with --lora or --qlora")
        return {}
    if not args.config:
        raise ValueError("--lora and --qlora go with --config")
    alpha = args.lora_alpha
    if alpha is not None and alpha.is_integer():
        alpha = int(alpha)
    return {"lora": args.lora, "qlora": args.qlora, "lora_rank": args.lora_rank,
            "lora_alpha": alpha, "lora_targets": args.lora_targets,
            "lora_dropout": args.lora_dropout}
