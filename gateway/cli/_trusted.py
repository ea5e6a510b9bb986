"""The engine public keys an auditor's command trusts: ``--keys FILE``, else the home's."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["MAX_KEYS_FILE_BYTES", "public_keys"]

MAX_KEYS_FILE_BYTES = 1 << 20


def public_keys(args: argparse.Namespace) -> dict[str, Any]:
    """Trusted engine public keys: ``--keys FILE``, else the home's signing keys."""
    from engine import admin

    if args.keys:
        with open(args.keys, "rb") as fh:
            raw = fh.read(MAX_KEYS_FILE_BYTES + 1)
        if len(raw) > MAX_KEYS_FILE_BYTES:
            raise ValueError("the keys file is too large")
        try:
            doc = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            raise ValueError("the keys file is not JSON chit can read") from None
    else:
        home = admin.resolve_home(args.home)
        doc = admin.export_public(home)
    return admin.load_trusted_keys(doc)
