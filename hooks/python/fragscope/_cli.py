"""The `fragscope` command of the installed package: runs the bundled program (fragscope/bin/)."""
import os
import sys


def main():
    program = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "fragscope")
    if not os.path.isfile(program):
        sys.exit(f"fragscope: {program} is missing: this package was not installed by "
                 "`pip install` (run build/fragscope from a source build instead)")
    # `fragscope predict|carry|fit` run this package again, in this interpreter (the one it is
    # installed in, with its torch), not whichever python3 is first on PATH.
    os.environ.setdefault("FRAGSCOPE_PYTHON", sys.executable)
    os.execv(program, [program] + sys.argv[1:])


if __name__ == "__main__":
    main()
