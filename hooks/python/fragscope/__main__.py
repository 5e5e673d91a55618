"""python -m fragscope predict|carry|fit ...: the predictor's command line (predictor/cli.py)."""

import sys

from .predictor.cli import main

if __name__ == "__main__":
    sys.exit(main())
