"""`python -m harness`: the conformance harness's command line (main.py)."""

import sys

from .main import main

sys.exit(main())
