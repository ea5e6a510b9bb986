"""``chit keys list|rotate|retire|export-public``: the home's keys, never a secret.

The key kinds and files are in keys/README.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from gateway.cli._output import EXIT_OK, print_json, when, write_new_file

if TYPE_CHECKING:
    from argparse import _SubParsersAction

__all__ = ["add_keys"]


def add_keys(
    sub: _SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``chit keys`` and its subcommands to ``sub``."""
    keys = sub.add_parser(
        "keys", parents=[common],
        help="root, signing and sealing keys: list, rotate, retire, export-public"
    )
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    p = keys_sub.add_parser("list", parents=[common], help="ids and states, never secrets")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_keys)
    p = keys_sub.add_parser("rotate", parents=[common], help="add a new root key (it mints)")
    p.add_argument("--signing", action="store_true",
                   help="rotate the Ed25519 provenance signing key instead")
    p.add_argument("--sealing", action="store_true",
                   help="add a sealing key for protected content instead (older ones still open)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_keys)
    p = keys_sub.add_parser(
        "export-public", parents=[common],
        help="print the engine's public signing keys (chit-engine-keys/1) for auditors",
    )
    p.add_argument("--out", help="write to this new file instead of stdout")
    p.set_defaults(func=cmd_keys)
    p = keys_sub.add_parser(
        "retire", parents=[common],
        help="retire a key by its id: a root key's tokens stop working; an older sealing "
        "key's content stops opening"
    )
    p.add_argument("kid")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_keys)


def cmd_keys(args: argparse.Namespace) -> int:
    from engine import admin

    home = admin.resolve_home(args.home)
    admin.ensure_home(home)
    if args.keys_command == "export-public":
        doc = admin.export_public(home)
        text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
        if args.out:
            write_new_file(args.out, text, 0o644)
            print(f"wrote {len(doc['keys'])} public key(s) to {args.out}", file=sys.stderr)
        else:
            sys.stdout.write(text)
        return EXIT_OK
    if args.keys_command == "rotate":
        if args.signing and args.sealing:
            raise ValueError("rotate one kind at a time: --signing or --sealing")
        if args.signing:
            keys = [admin.rotate_signing_key(home)]
        elif args.sealing:
            keys = [admin.rotate_sealing_key(home)]
        else:
            keys = [admin.rotate_key(home, state=args.state)]
    elif args.keys_command == "retire":
        keys = [admin.retire_key(home, args.kid, state=args.state)]
    else:
        keys = admin.list_keys(home)
    if args.json:
        print_json(keys if args.keys_command == "list" else keys[0])
        return EXIT_OK
    for key in keys:
        if key.get("kind") == "signing":
            role = "signs provenance" if key["signing"] else "verifies old provenance"
        elif key.get("kind") == "sealing":
            role = "seals" if key["signing"] else ("opens" if key["status"] == "active" else "")
        else:
            role = "mints" if key["signing"] else ("verifies" if key["status"] == "active" else "")
        print(f"{key['kid']}  {key.get('kind', 'root'):7} {key['status']:8} "
              f"{when(key['created'])}  {role}".rstrip())
    return EXIT_OK
