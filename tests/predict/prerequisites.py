"""What the predict tests need: torch, transformers and the LibTorch hook library, and the
packages a test names (peft and bitsandbytes for the adapters' test), and for the parallel
tests torch.distributed with the fake process group."""
import importlib
import os


def missing(*packages):
    """Why the tests cannot run here, or None. `packages`: more modules the test imports."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        return f"needs torch and transformers ({e})"
    for package in packages:
        try:
            importlib.import_module(package)
        except ImportError as e:
            return f"needs {package} ({e}; scripts/setup.sh installs it)"
    lib_dir = os.environ.get("FRAGSCOPE_LIB_DIR", "")
    if not os.path.isfile(os.path.join(lib_dir, "libfragscope_torch.so")):
        return "needs libfragscope_torch.so (LibTorch hooks)"
    return None


def missing_distributed(module, name, what):
    """missing(), or why torch.distributed with the fake process group and `module`.`name` (what a
    parallel test needs: `what` says it) cannot run here, or None."""
    why = missing()
    if why:
        return why
    try:
        import torch.distributed as dist
        from torch.testing._internal.distributed import fake_pg  # noqa: F401

        getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        return f"needs torch.distributed with {what} and the fake process group ({e})"
    if not dist.is_available():
        return "needs torch.distributed"
    return None
