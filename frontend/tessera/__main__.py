"""`python -m tessera ...`: the tessera command line (tessera/cli.py)."""
import sys

from .cli import main

sys.exit(main())
