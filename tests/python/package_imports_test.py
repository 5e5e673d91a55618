"""The Python package's imports (hooks/python/fragscope): its import graph has no cycle, and each
module imports alone in a fresh interpreter.

The graph is read from the source (ast), every import counted, those inside functions too (a
deferred import that closes a circle is still one): `from . import x` names the submodule x when
there is one, else the package's __init__.py; `from .m import y` names m. A module whose import
needs a package this Python lacks (torch, transformers) is reported and not failed.

Run by ctest (tests/python/CMakeLists.txt, python.package_imports) with PYTHONPATH=hooks/python.
"""
import ast
import concurrent.futures
import os
import subprocess
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCE = os.path.join(ROOT, "hooks", "python")
PACKAGE = "fragscope"


def modules():
    """{dotted name: path} of every module of the package."""
    found = {}
    for directory, subdirectories, files in os.walk(os.path.join(SOURCE, PACKAGE)):
        subdirectories[:] = sorted(d for d in subdirectories if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                dotted = os.path.relpath(path, SOURCE)[:-3].replace(os.sep, ".")
                found[dotted.removesuffix(".__init__")] = path
    return found


def imported(name, path, known):
    """The package's modules that module `name` imports, anywhere in its body."""
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    targets = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                targets.add(submodule if submodule in known else base)
    return {t for t in targets if t in known and t != name}


def find_cycle(graph):
    """One cycle of `graph` ({node: successors}) as a list of nodes, or None."""
    state = {}  # node -> "open" while on the current path, "done" after
    path = []

    def visit(node):
        state[node] = "open"
        path.append(node)
        for successor in sorted(graph[node]):
            if state.get(successor) == "open":
                return path[path.index(successor):] + [successor]
            if successor not in state:
                cycle = visit(successor)
                if cycle:
                    return cycle
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


class ImportGraphTest(unittest.TestCase):
    def test_the_package_has_no_import_cycle(self):
        known = modules()
        graph = {name: imported(name, path, known) for name, path in known.items()}
        cycle = find_cycle(graph)
        self.assertIsNone(cycle, "import cycle: " + " -> ".join(cycle or []))

    def test_the_checker_finds_a_cycle(self):
        self.assertEqual(find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}), ["a", "b", "c", "a"])
        self.assertIsNone(find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}))


def import_alone(name):
    """(name, None) when `import name` works in a fresh interpreter, else (name, its error)."""
    env = dict(os.environ, PYTHONPATH=SOURCE)
    run = subprocess.run([sys.executable, "-c", f"import {name}"], env=env,
                         capture_output=True, text=True)
    return name, (run.stderr.strip().splitlines() or ["exit status %d" % run.returncode])[-1] \
        if run.returncode else None


class ImportAloneTest(unittest.TestCase):
    def test_each_module_imports_alone(self):
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            results = list(pool.map(import_alone, sorted(modules())))
        failed, lacking = [], []
        for name, error in results:
            if error is None:
                continue
            missing = error.startswith("ModuleNotFoundError") and f"'{PACKAGE}" not in error
            (lacking if missing else failed).append(f"{name}: {error}")
        for line in lacking:
            print(f"not imported, a package is missing: {line}")
        self.assertEqual(failed, [])


if __name__ == "__main__":
    unittest.main()
