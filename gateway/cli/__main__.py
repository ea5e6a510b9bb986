"""``python -m gateway.cli``: the ``chit`` command."""

import sys

from gateway.cli import main

sys.exit(main())
