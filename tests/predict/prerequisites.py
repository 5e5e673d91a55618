"""What the predict tests need: torch, transformers and the LibTorch hook library, and the
packages a test names (peft and bitsandbytes for the adapters' test)."""
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
