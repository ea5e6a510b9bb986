"""Shared by the fuzz harnesses: the repository on ``sys.path`` and libFuzzer's entry.

Each ``fuzz_<target>.py`` imports this first, then chit's modules inside
``atheris.instrument_imports()``, and ends with :func:`run`. What a harness
counts as expected (chit's own refusals) it catches; anything else escapes
``TestOneInput`` and libFuzzer reports it as a crash (fuzz/README.md).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import atheris

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The chit packages and the parsers they hand untrusted bytes to.
INSTRUMENT = ["engine", "policy", "gateway"]


def text_of(data: bytes) -> str:
    """The input as text: UTF-8, with each byte that is not UTF-8 a lone surrogate."""
    return data.decode("utf-8", errors="surrogateescape")


def run(test_one_input: Callable[[bytes], None]) -> None:
    """Hand ``test_one_input`` to libFuzzer with the command line's options."""
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
