"""`python -m app`: the `foundry-gateway` command line (app/cli.py)."""

import sys

from app.cli import main

sys.exit(main())
