"""What the predict tests need: torch, transformers and the LibTorch hook library."""
import os


def missing():
    """Why the tests cannot run here, or None."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        return f"needs torch and transformers ({e})"
    lib_dir = os.environ.get("FRAGSCOPE_LIB_DIR", "")
    if not os.path.isfile(os.path.join(lib_dir, "libfragscope_torch.so")):
        return "needs libfragscope_torch.so (LibTorch hooks)"
    return None
