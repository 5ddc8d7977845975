"""`python -m app.records migrate|prune`: kept for scripts written before `foundry-gateway migrate`
and `foundry-gateway prune` (app/cli.py), which it runs."""

from __future__ import annotations

import sys

from app.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:2]))
