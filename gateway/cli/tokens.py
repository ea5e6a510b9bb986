"""``chit mint``, ``exchange``, ``inspect``, ``attenuate`` and ``revoke``: the token commands.

Tokens are secrets: a command prints one only where asked (stdout or a new
0600 file), never in an error. The format is in docs/token-format.md; the
exchange in docs/exchange.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gateway.cli._output import EXIT_OK, print_json, shown, write_new_file

if TYPE_CHECKING:
    from argparse import _SubParsersAction

__all__ = [
    "MAX_TOKEN_FILE_BYTES",
    "add_attenuate",
    "add_exchange",
    "add_inspect",
    "add_mint",
    "add_revoke",
]

MAX_TOKEN_FILE_BYTES = 16384


def _split(values: Sequence[str]) -> list[str]:
    out: list[str] = []
    for value in values:
        out.extend(v.strip() for v in value.split(",") if v.strip())
    return out


def add_mint(
    sub: _SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``chit mint`` to ``sub``."""
    p = sub.add_parser("mint", parents=[common], help="mint a root token for an agent")
    p.add_argument("--agent", required=True, help="agent name; its lane is agent/NAME")
    p.add_argument("--ops", required=True, nargs="+", help="read,write,commit,sub-token:issue")
    p.add_argument("--paths", required=True, nargs="+", help="path globs, e.g. 'src/**'")
    p.add_argument("--repos", required=True, nargs="+",
                   help="repository name globs the token is good for, e.g. 'app' or 'app-*' "
                   "(docs/token-format.md)")
    p.add_argument("--ttl", required=True, help="lifetime: 90s, 15m, 2h, 7d")
    p.add_argument("--delegable", action="store_true", help="grant the delegation flag")
    p.add_argument("--out", help="write the token to this new file (0600) instead of stdout")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_mint)


def cmd_mint(args: argparse.Namespace) -> int:
    from engine import admin

    home = admin.resolve_home(args.home)
    admin.ensure_home(home)
    ttl = admin.parse_duration(args.ttl)
    if args.delegable and "sub-token:issue" not in _split(args.ops):
        # The flag alone grants nothing: issue_sub_token needs the operation too.
        raise ValueError("--delegable is useless without the sub-token:issue operation")
    info = admin.mint_token(
        home,
        agent=args.agent,
        operations=_split(args.ops),
        paths=_split(args.paths),
        ttl_seconds=ttl,
        delegable=args.delegable,
        repos=_split(args.repos),
    )
    if args.out:
        write_new_file(args.out, info["token"] + "\n", 0o600)
        info = {k: v for k, v in info.items() if k != "token"} | {"token_file": args.out}
        if not args.json:
            print(f"token {info['token_id']} written to {args.out} (0600)")
    if args.json:
        print_json(info)
    elif not args.out:
        print(info["token"])
    return EXIT_OK


def add_exchange(
    sub: _SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``chit exchange`` to ``sub``."""
    p = sub.add_parser(
        "exchange", parents=[common],
        help="exchange an identity provider's JWT for a root token (docs/exchange.md)",
    )
    p.add_argument("--jwt", required=True, metavar="FILE", help="the JWT file, or - for stdin")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_exchange)


def cmd_exchange(args: argparse.Namespace) -> int:
    """``chit exchange --jwt FILE``: an identity provider's JWT for a root token (operator-side)."""
    from engine import admin

    home = admin.resolve_home(args.home)
    admin.ensure_home(home)
    if args.jwt == "-":
        text = sys.stdin.read(admin.LIMITS.jwt_chars + 2)
    else:
        with open(args.jwt, encoding="ascii") as fh:
            text = fh.read(admin.LIMITS.jwt_chars + 2)
    exchanger = admin.TokenExchange(home, channel="cli", state=args.state)
    try:
        info = exchanger.exchange(text)
    finally:
        exchanger.close()
    if args.json:
        print_json(info)
    else:
        print(info["token"])
    return EXIT_OK


def add_inspect(
    sub: _SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``chit inspect`` to ``sub``."""
    p = sub.add_parser(
        "inspect", parents=[common], help="show a token's id, blocks and caveats (never its tag)"
    )
    p.add_argument("token", help="the token, or - to read it from stdin")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_inspect)


def cmd_inspect(args: argparse.Namespace) -> int:
    from engine import admin

    text = args.token
    if text == "-":
        text = sys.stdin.read()
    info = admin.inspect_token(text.strip())
    if args.json:
        print_json(info)
        return EXIT_OK
    print(f"token id:  {info['id']}  (unverified: inspection checks no signature)")
    print(
        f"format:    chit-token/{info['version']} {shown(info['algorithm'])}, "
        f"key id {shown(info['key_id'])}"
    )
    for i, block in enumerate(info["blocks"]):
        who = f" agent={shown(block['agent'])}" if "agent" in block else ""
        print(f"block {i}:   {block['id']}{who}")
        for caveat in block["caveats"]:
            print(f"           {shown(caveat)}")
    last = info["blocks"][-1]["id"]
    print(f"revoke:    chit revoke {info['id']}  (this token with every attenuation and "
          "sub-token of it)")
    if last != info["id"]:
        print(f"           chit revoke {last}  (only this attenuation, its last block, "
              "and what derives from it)")
    return EXIT_OK


def add_attenuate(
    sub: _SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``chit attenuate`` to ``sub``."""
    p = sub.add_parser(
        "attenuate", parents=[common], help="narrow a token offline (never wider than its parent)"
    )
    p.add_argument("token", help="the token, or - to read it from stdin")
    p.add_argument("--ops", nargs="+", help="operations to keep")
    p.add_argument("--paths", nargs="+", help="globs to limit to")
    p.add_argument("--repos", nargs="+", help="repository name globs to limit to")
    p.add_argument("--ttl", help="expire this long from now (never later than the parent)")
    p.add_argument("--drop-delegation", action="store_true", help="remove the delegation flag")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_attenuate)


def cmd_attenuate(args: argparse.Namespace) -> int:
    from engine import admin

    from_stdin = args.token == "-"  # noqa: S105 - the stdin marker, not a secret
    text = sys.stdin.read(MAX_TOKEN_FILE_BYTES) if from_stdin else args.token
    ttl = admin.parse_duration(args.ttl) if args.ttl else None
    info = admin.attenuate_token(
        text.strip(),
        operations=_split(args.ops) if args.ops is not None else None,
        paths=_split(args.paths) if args.paths is not None else None,
        ttl_seconds=ttl,
        drop_delegation=args.drop_delegation,
        repos=_split(args.repos) if args.repos is not None else None,
    )
    if args.json:
        print_json(info)
    else:
        print(info["token"])
    return EXIT_OK


def add_revoke(
    sub: _SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``chit revoke`` to ``sub``."""
    p = sub.add_parser("revoke", parents=[common], help="revoke a token or block id")
    p.add_argument("id", help="token id or block id (32 hex digits), see `chit inspect`")
    p.add_argument("--reason", default="", help="recorded with the revocation")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_revoke)


def cmd_revoke(args: argparse.Namespace) -> int:
    from engine import admin

    home = admin.resolve_home(args.home)
    admin.ensure_home(home)
    info = admin.revoke(home, args.id, reason=args.reason, state=args.state)
    if args.json:
        print_json(info)
    else:
        state = "revoked" if info["new"] else "was already revoked"
        known = info["known"]
        if known is None:
            print(f"{info['id']} {state}, but chit has no record of it: no sub-token it "
                  "issued and no call within a token's lifetime carries it (minted tokens "
                  "are recorded nowhere). Any token carrying it fails from its next call; "
                  "check the id with chit inspect.")
        else:
            how = ("issued as a sub-token" if known["seen"] == "delegation"
                   else "seen in its calls")
            print(f"{info['id']} {state}: the token of agent {shown(known['agent'])} "
                  f"({how}); it and every token derived from it now fail")
    return EXIT_OK
