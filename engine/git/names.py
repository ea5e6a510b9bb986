"""The reference namespaces chit reads and writes, and the shapes of names in them.

Lanes are ``refs/heads/agent/<agent>``; chit's own store is ``refs/chit/*``, its
attestation notes ``refs/notes/chit``, and
what it fetched from a remote is kept under ``refs/chit/upstream/``
(docs/architecture.md, "Version control").
"""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "AGENT_NAME",
    "BRANCH_NAME",
    "HEX_PREFIX",
    "LANE_PREFIX",
    "MAIN",
    "NOTES_REF",
    "STORE_PREFIX",
    "UPSTREAM_PREFIX",
]

MAIN: Final = "refs/heads/main"
"""The conventional base branch; a repository's own base is :attr:`Handle.base_ref`."""

LANE_PREFIX: Final = "refs/heads/agent/"
STORE_PREFIX: Final = "refs/chit/"
UPSTREAM_PREFIX: Final = "refs/chit/upstream/"
"""Where refs fetched from a remote are kept: ``refs/X`` there is ``refs/chit/upstream/X``."""
NOTES_REF: Final = "refs/notes/chit"
"""chit's attestation notes (``git notes --ref=chit``; docs/attestations.md)."""

HEX_PREFIX: Final = re.compile(r"[0-9a-fA-F]{7,40}")
"""A commit id prefix an agent may give."""
BRANCH_NAME: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/-]{0,199}")
"""A branch short name chit accepts (git's own rules are checked too)."""
AGENT_NAME: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")
"""One reference component naming a lane's agent."""
