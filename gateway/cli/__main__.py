"""``python -m gateway.cli``: the ``chit`` command (README.md)."""

import sys

from gateway.cli import main

sys.exit(main())
