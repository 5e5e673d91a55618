"""One allocator library per process: libfragscope_torch.so loaded by the Python helper uses the
libfragscope_alloc.so of its own directory (fragscope.lib_dir()), even when LD_LIBRARY_PATH names
another copy first (a second build, a pack, an older install). With two copies, PyTorch's
allocator would be one and mark(), flush() and stats() would reach the other: the log would carry
no markers and stats() would read zeros.

Run by ctest with FRAGSCOPE_LIB_DIR set; skipped without torch or libfragscope_torch.so.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import fragscope

# The child loads the torch hook the way use_allocator() and observe() do, then lists every file
# of an allocator library mapped into it.
CHILD = """
import torch, fragscope
fragscope._library.load(fragscope._library.TORCH)
fragscope._library.load(fragscope._library.ALLOC)
maps = {line.split()[-1] for line in open("/proc/self/maps") if "libfragscope_alloc" in line}
print("\\n".join(sorted(os.path.realpath(m) for m in maps)))
"""


def have_torch_hook():
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return os.path.isfile(os.path.join(fragscope.lib_dir(), fragscope._library.TORCH))


@unittest.skipUnless(have_torch_hook(), "needs torch and libfragscope_torch.so")
class LibraryCopiesTest(unittest.TestCase):
    def test_a_copy_on_ld_library_path_is_not_loaded(self):
        decoy = tempfile.mkdtemp()
        shutil.copy(os.path.join(fragscope.lib_dir(), fragscope._library.ALLOC), decoy)
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = ":".join(filter(None, [decoy, env.get("LD_LIBRARY_PATH")]))
        p = subprocess.run([sys.executable, "-c", "import os\n" + CHILD], env=env,
                           capture_output=True, text=True, timeout=120)
        shutil.rmtree(decoy)
        self.assertEqual(p.returncode, 0, p.stderr)
        own = os.path.realpath(os.path.join(fragscope.lib_dir(), fragscope._library.ALLOC))
        self.assertEqual(p.stdout.split(), [own])


if __name__ == "__main__":
    unittest.main()
