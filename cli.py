"""Run napkin from a checkout without installing it: `python cli.py analyze attention --gpu h100`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from analyzer.cli import main  # noqa: E402

if __name__ == "__main__":
    main()
