"""The ``chit`` command line, for operators, agent hosts and auditors.

Commands (docs/architecture.md): ``init``, ``mint``, ``attenuate``, ``inspect``,
``revoke``, ``keys list|rotate|retire|export-public``, ``freeze on|off|status``,
``policy check``, ``exchange``, ``mcp`` (stdio, ``--http``, ``--engine``),
``engine serve``, ``audit verify``, ``audit graph``, ``audit log verify|show``
and ``demo``.
Every engine error is caught in one place, printed as its code and message
(never a traceback, never a token or key) and turned into exit status 2; a failed
audit exits 1.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine.errors import ChitError, ConfigurationError

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_ERROR = 0, 1, 2


def _print_json(doc: Any) -> None:
    print(json.dumps(doc, indent=2, sort_keys=True))


def _split(values: Sequence[str]) -> list[str]:
    out: list[str] = []
    for value in values:
        out.extend(v.strip() for v in value.split(",") if v.strip())
    return out


def cmd_init(args: argparse.Namespace) -> int:
    from engine.admin import operator

    home = operator.resolve_home(args.home)
    info = operator.init_home(home)
    if args.repo:
        from engine import git

        git.Repository(args.repo)  # refuses a path that is not a repository with main
        info["repo"] = str(Path(args.repo).resolve())
    if args.json:
        _print_json(info)
    else:
        print(f"chit home:  {info['home']}")
        print(f"root key:   {info['key_id']} (keys/root, 0600)")
        print(f"sealing:    {info['sealing_key_id']} (keys/sealing, 0600)")
        print(f"policy:     {info['policy']}" + (" (created)" if info["created_policy"] else ""))
        if args.repo:
            print(f"repository: {info['repo']} (has main)")
    return EXIT_OK


def cmd_mint(args: argparse.Namespace) -> int:
    from engine.admin import operator

    home = operator.resolve_home(args.home)
    operator.ensure_home(home)
    ttl = operator.parse_duration(args.ttl)
    info = operator.mint_token(
        home,
        agent=args.agent,
        operations=_split(args.ops),
        paths=_split(args.paths),
        ttl_seconds=ttl,
        delegable=args.delegable,
    )
    if args.out:
        _write_new_file(args.out, info["token"] + "\n", 0o600)
        info = {k: v for k, v in info.items() if k != "token"} | {"token_file": args.out}
        if not args.json:
            print(f"token {info['token_id']} written to {args.out} (0600)")
    if args.json:
        _print_json(info)
    elif not args.out:
        print(info["token"])
    return EXIT_OK


def cmd_exchange(args: argparse.Namespace) -> int:
    """``chit exchange --jwt FILE``: an identity provider's JWT for a root token (operator-side)."""
    from engine.admin import exchange, operator

    home = operator.resolve_home(args.home)
    operator.ensure_home(home)
    if args.jwt == "-":
        text = sys.stdin.read(exchange.MAX_JWT_CHARS + 2)
    else:
        with open(args.jwt, encoding="ascii") as fh:
            text = fh.read(exchange.MAX_JWT_CHARS + 2)
    info = exchange.exchange(home, text)
    if args.json:
        _print_json(info)
    else:
        print(info["token"])
    return EXIT_OK


def cmd_inspect(args: argparse.Namespace) -> int:
    from engine.admin import operator

    text = args.token
    if text == "-":
        text = sys.stdin.read()
    info = operator.inspect_token(text.strip())
    if args.json:
        _print_json(info)
        return EXIT_OK
    print(f"token id:  {info['id']}  (unverified: inspection checks no signature)")
    print(
        f"format:    chit-token/{info['version']} {_shown(info['algorithm'])}, "
        f"key id {_shown(info['key_id'])}"
    )
    for i, block in enumerate(info["blocks"]):
        who = f" agent={_shown(block['agent'])}" if "agent" in block else ""
        print(f"block {i}:   {block['id']}{who}")
        for caveat in block["caveats"]:
            print(f"           {_shown(caveat)}")
    return EXIT_OK


MAX_TOKEN_FILE_BYTES = 16384
MAX_KEYS_FILE_BYTES = 1 << 20


def _write_new_file(path: str, text: str, mode: int) -> None:
    """Write ``text`` to a file that must not exist yet (``O_EXCL``), with ``mode``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def cmd_attenuate(args: argparse.Namespace) -> int:
    from engine.admin import operator

    from_stdin = args.token == "-"  # noqa: S105 - the stdin marker, not a secret
    text = sys.stdin.read(MAX_TOKEN_FILE_BYTES) if from_stdin else args.token
    ttl = operator.parse_duration(args.ttl) if args.ttl else None
    info = operator.attenuate_token(
        text.strip(),
        operations=_split(args.ops) if args.ops is not None else None,
        paths=_split(args.paths) if args.paths is not None else None,
        ttl_seconds=ttl,
        drop_delegation=args.drop_delegation,
    )
    if args.json:
        _print_json(info)
    else:
        print(info["token"])
    return EXIT_OK


def cmd_revoke(args: argparse.Namespace) -> int:
    from engine.admin import operator

    home = operator.resolve_home(args.home)
    operator.ensure_home(home)
    info = operator.revoke(home, args.id, reason=args.reason)
    if args.json:
        _print_json(info)
    else:
        state = "revoked" if info["new"] else "was already revoked"
        print(f"{info['id']} {state}: it and every token derived from it now fail")
    return EXIT_OK


def cmd_keys(args: argparse.Namespace) -> int:
    from engine.admin import operator

    home = operator.resolve_home(args.home)
    operator.ensure_home(home)
    if args.keys_command == "export-public":
        doc = operator.export_public(home)
        text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
        if args.out:
            _write_new_file(args.out, text, 0o644)
            print(f"wrote {len(doc['keys'])} public key(s) to {args.out}", file=sys.stderr)
        else:
            sys.stdout.write(text)
        return EXIT_OK
    if args.keys_command == "rotate":
        if args.signing and args.sealing:
            raise ValueError("rotate one kind at a time: --signing or --sealing")
        rotate = (
            operator.rotate_signing_key
            if args.signing
            else operator.rotate_sealing_key
            if args.sealing
            else operator.rotate_key
        )
        keys = [rotate(home)]
    elif args.keys_command == "retire":
        keys = [operator.retire_key(home, args.kid)]
    else:
        keys = operator.list_keys(home)
    if args.json:
        _print_json(keys if args.keys_command == "list" else keys[0])
        return EXIT_OK
    for key in keys:
        if key.get("kind") == "signing":
            role = "signs provenance" if key["signing"] else "verifies old provenance"
        elif key.get("kind") == "sealing":
            role = "seals" if key["signing"] else ("opens" if key["status"] == "active" else "")
        else:
            role = "mints" if key["signing"] else ("verifies" if key["status"] == "active" else "")
        print(f"{key['kid']}  {key.get('kind', 'root'):7} {key['status']:8} {role}")
    return EXIT_OK


def cmd_policy_check(args: argparse.Namespace) -> int:
    from engine.admin import operator
    from engine.service.policyfile import check_file

    path = args.file or str(operator.resolve_home(args.home) / "policy.toml")
    report = check_file(path)
    if args.json:
        _print_json(report)
    else:
        errors: list[dict[str, Any]] = report["errors"]  # type: ignore[assignment]
        for error in errors:
            where = f"{path}:{error['line']}" if error["line"] is not None else path
            print(f"{where}: {error['location']}: {error['message']}")
        if report["ok"]:
            print(f"{path}: valid ({report['rules']} rules, {report['rate_limits']} rate "
                  f"limits); policy hash {report['policy_hash']}")
        else:
            print(f"{path}: invalid ({len(errors)} errors)", file=sys.stderr)
    return EXIT_OK if report["ok"] else EXIT_FAILED


def _read_token(args: argparse.Namespace) -> str:
    if args.token_file:
        with open(args.token_file, "rb") as fh:
            raw = fh.read(MAX_TOKEN_FILE_BYTES + 1)
        if len(raw) > MAX_TOKEN_FILE_BYTES:
            raise ConfigurationError("the token file is too large to hold a token")
        try:
            text = raw.decode("ascii").strip()
        except UnicodeDecodeError:
            raise ConfigurationError("the token file does not hold a chit token") from None
    else:
        text = os.environ.get("CHIT_TOKEN", "").strip()
    if not text:
        raise ConfigurationError("no token: set CHIT_TOKEN or pass --token-file")
    return text


def _shown(value: object) -> str:
    """Render untrusted text for a terminal: escapes, never control sequences."""
    return json.dumps(value, ensure_ascii=True)


def cmd_mcp(args: argparse.Namespace) -> int:
    if args.http:
        return _mcp_http(args)
    if args.authorization_server:
        raise ValueError("--authorization-server applies to --http (the RFC 9728 metadata)")
    if args.engine:
        return _mcp_remote(args)
    from engine.admin import operator
    from engine.service import Engine
    from gateway.mcp_server import serve_stdio

    home = operator.resolve_home(args.home)
    operator.ensure_home(home)
    token = _read_token(args)
    engine = Engine(home, args.repo, read_only=args.read_only)
    serve_stdio(engine, token)
    return EXIT_OK


def _mcp_http(args: argparse.Namespace) -> int:
    """``chit mcp --http HOST:PORT``: streamable HTTP, a bearer token on every request."""
    from gateway.http_edge import HttpSettings, parse_listen_address, serve_http

    if args.token_file:
        raise ValueError("--token-file is for stdio; over HTTP every request carries its own "
                         "bearer token")
    host, port = parse_listen_address(args.http)
    settings = HttpSettings(
        host=host,
        port=port,
        allow_non_loopback=args.unsafe_non_loopback,
        allowed_hosts=tuple(args.allowed_host or ()),
        public_url=args.public_url,
        watch_interval=args.watch_interval,
        authorization_server=args.authorization_server,
    )
    if getattr(args, "engine", None):
        from gateway.remote_engine import RemoteEngine

        if args.read_only:
            raise ValueError("--read-only applies to an embedded engine; with --engine, the "
                             "engine decides (chit freeze on)")
        with RemoteEngine(args.engine) as remote:
            serve_http(remote, settings)
        return EXIT_OK
    from engine.admin import operator
    from engine.service import Engine

    home = operator.resolve_home(args.home)
    operator.ensure_home(home)
    serve_http(Engine(home, args.repo, read_only=args.read_only), settings)
    return EXIT_OK


def _mcp_remote(args: argparse.Namespace) -> int:
    """``chit mcp --engine URL``: an edge with no keys, no repository and no home."""
    from gateway.mcp_server import serve_stdio
    from gateway.remote_engine import RemoteEngine

    if getattr(args, "read_only", False):
        raise ValueError("--read-only applies to an embedded engine; with --engine, the "
                         "engine decides (chit freeze on)")
    token = _read_token(args)
    with RemoteEngine(args.engine) as engine:
        health = engine.health()
        if not health.get("ok"):
            logging.getLogger("chit.gateway").warning(
                "the engine at %s does not answer yet; calls fail until it does", args.engine
            )
        serve_stdio(engine, token)
    return EXIT_OK


def cmd_engine_serve(args: argparse.Namespace) -> int:
    from engine.admin import exchange, operator
    from engine.service import Engine
    from gateway import _oauth, engine_server

    home = operator.resolve_home(args.home)
    operator.ensure_home(home)
    if args.socket_group and args.listen:
        raise ValueError("--socket-group applies to --socket, not --listen")
    if args.max_request_bytes < 1024:
        raise ValueError("--max-request-bytes must be at least 1024")
    address = engine_server.parse_listen(args.listen) if args.listen else None
    public_url = None
    if args.public_url is not None:
        public_url = _oauth.check_issuer_url(
            args.public_url, option="--public-url", origin_only=True
        )
    engine = Engine(home, args.repo)  # refuses an unusable keyring, policy or repository
    exchanger = exchange.TokenExchange(home, channel="token_endpoint")
    if address is not None:
        listener = engine_server.bind_tcp(*address)
    else:
        path = args.socket or home / engine_server.DEFAULT_SOCKET_NAME
        listener = engine_server.bind_unix(path, group=args.socket_group)
    engine_server.serve(
        engine, listener, max_request_bytes=args.max_request_bytes,
        exchange=exchanger, public_url=public_url,
    )
    return EXIT_OK


def _when(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _term(value: object) -> str:
    """Untrusted text for a terminal: as is if plain printable ASCII, else JSON-escaped."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if text and all("!" <= c <= "~" for c in text):
        return text
    return json.dumps(text, ensure_ascii=True)


def cmd_freeze(args: argparse.Namespace) -> int:
    from engine.admin import oversight

    home = operator_home(args)
    if args.freeze_command == "status":
        info = oversight.freeze_status(home)
    else:
        on = args.freeze_command == "on"
        info = oversight.set_freeze(home, on, reason=args.reason if on else "")
    if args.json:
        _print_json(info)
        return EXIT_OK
    if args.freeze_command != "status":
        print("frozen: every engine on this home serves read-only tools from its next call"
              if info["frozen"] else "unfrozen: engines serve every tool their tokens unlock")
        if not info["logged"]:
            print("warning: the change could not be recorded in the call log", file=sys.stderr)
    elif info["frozen"]:
        reason = f": {_term(info['reason'])}" if info["reason"] else ""
        print(f"frozen since {_when(info['changed_at'])}{reason}")
    else:
        print("not frozen")
    return EXIT_OK


def operator_home(args: argparse.Namespace) -> Path:
    from engine.admin import operator

    home = operator.resolve_home(args.home)
    operator.ensure_home(home)
    return home


def cmd_audit_log(args: argparse.Namespace) -> int:
    from engine.admin import operator, oversight

    home = operator.resolve_home(args.home)
    if args.log_command == "show":
        since = oversight.parse_since(args.since) if args.since else None
        entries = oversight.call_log_entries(home, agent=args.agent, since=since)
        if args.json:
            _print_json(list(entries))
            return EXIT_OK
        for e in entries:
            if "undecodable" in e:
                print(f"{e['seq']:>7} (undecodable: {e['undecodable']})")
                continue
            outcome = e["decision"] + (f":{e['code']}" if e["code"] else "")
            arguments = json.dumps(e["arguments"], sort_keys=True, separators=(",", ":"))
            print(f"{e['seq']:>7} {_when(e['time'])} {_term(e['agent'])} {_term(e['tool'])} "
                  f"{_term(outcome)} session={_term(e['session'])} "
                  + arguments.replace("\x7f", "\\u007f"))
        return EXIT_OK
    anchors = dict(oversight.parse_anchor(a) for a in args.anchor or ())
    report = oversight.verify_call_log(home, _public_keys(args), anchors=anchors)
    if args.json:
        _print_json(report)
    else:
        for f in report["findings"]:
            where = f"entry {f['seq']}" if f["seq"] is not None else "log"
            print(f"{where} {f['check']}: {f['reason']}")
        head = report["head"]
        at = f"; head {head['seq']}:{head['hash']}" if head else ""
        if report["ok"]:
            print(f"verified: {report['entries']} entries{at}")
        else:
            print(f"FAILED: {report['entries']} entries; {len(report['findings'])} findings")
    return EXIT_OK if report["ok"] else EXIT_FAILED


def _public_keys(args: argparse.Namespace) -> dict[str, Any]:
    """Trusted engine public keys: ``--keys FILE``, else the home's signing keys."""
    from engine.admin import operator
    from engine.auth import signkeys

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
        home = operator.resolve_home(args.home)
        doc = operator.export_public(home)
    return signkeys.load_public_keys(doc)


def cmd_audit_verify(args: argparse.Namespace) -> int:
    from engine.audit.verify import verify_repository

    report = verify_repository(args.repo, args.lanes or None, public_keys=_public_keys(args))
    if args.json:
        _print_json(report)
    else:
        for item in report["commits"]:
            mark = "ok  " if item["ok"] else "FAIL"
            print(f"{mark} {item['commit'][:12]} {item['lane']} catalog {item['catalog_hash']}")
        for finding in report["findings"]:
            print(f"  {finding['commit'][:12]} {finding['check']}: {finding['reason']}")
        total = len(report["commits"])
        good = sum(1 for c in report["commits"] if c["ok"])
        lanes = ", ".join(report["lanes"]) or "no lanes"
        verdict = "verified" if report["ok"] else "FAILED"
        findings = len(report["findings"])
        print(f"{verdict}: {good}/{total} commits on {lanes}; {findings} findings")
    return EXIT_OK if report["ok"] else EXIT_FAILED


def cmd_audit_graph(args: argparse.Namespace) -> int:
    from engine import git
    from engine.audit import graph

    repo = git.Repository(args.repo)
    entries, unverified, truncated = graph.collect(repo, _public_keys(args))
    found = graph.build_graph(entries, args.handle.strip())
    if truncated:
        print(f"note: only the first {graph.MAX_COMMITS} lane commits were read",
              file=sys.stderr)
    if args.format == "json":
        _print_json(found | {"unverified": unverified, "truncated": truncated})
    elif args.format == "mermaid":
        sys.stdout.write(graph.to_mermaid(found))
    else:
        sys.stdout.write(graph.to_dot(found))
    if unverified:
        print(f"note: {unverified} lane commit(s) without verified provenance were left out; "
              "run `chit audit verify`", file=sys.stderr)
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from gateway.demo import run_demo

    return run_demo(keep=args.keep)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chit", description="Capability gateway for coding agents."
    )
    parser.add_argument("--home", help="chit home (default: $CHIT_HOME, else ~/.chit)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--home", default=argparse.SUPPRESS, help="chit home")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "init", parents=[common], help="create the keyring (0600) and the default policy"
    )
    p.add_argument("--repo", help="also check that this repository has a main branch")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("mint", parents=[common], help="mint a root token for an agent")
    p.add_argument("--agent", required=True, help="agent name; its lane is agent/NAME")
    p.add_argument("--ops", required=True, nargs="+", help="read,write,commit,sub-token:issue")
    p.add_argument("--paths", required=True, nargs="+", help="path globs, e.g. 'src/**'")
    p.add_argument("--ttl", required=True, help="lifetime: 90s, 15m, 2h, 7d")
    p.add_argument("--delegable", action="store_true", help="grant the delegation flag")
    p.add_argument("--out", help="write the token to this new file (0600) instead of stdout")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_mint)

    p = sub.add_parser(
        "exchange", parents=[common],
        help="exchange an identity provider's JWT for a root token (docs/exchange.md)",
    )
    p.add_argument("--jwt", required=True, metavar="FILE", help="the JWT file, or - for stdin")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_exchange)

    p = sub.add_parser(
        "inspect", parents=[common], help="show a token's id, blocks and caveats (never its tag)"
    )
    p.add_argument("token", help="the token, or - to read it from stdin")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser(
        "attenuate", parents=[common], help="narrow a token offline (never wider than its parent)"
    )
    p.add_argument("token", help="the token, or - to read it from stdin")
    p.add_argument("--ops", nargs="+", help="operations to keep")
    p.add_argument("--paths", nargs="+", help="globs to limit to")
    p.add_argument("--ttl", help="expire this long from now (never later than the parent)")
    p.add_argument("--drop-delegation", action="store_true", help="remove the delegation flag")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_attenuate)

    p = sub.add_parser("revoke", parents=[common], help="revoke a token or block id")
    p.add_argument("id", help="token id or block id (32 hex digits), see `chit inspect`")
    p.add_argument("--reason", default="", help="recorded with the revocation")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_revoke)

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
        "retire", parents=[common], help="retire a key: its tokens stop working"
    )
    p.add_argument("kid")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_keys)

    pol = sub.add_parser("policy", parents=[common], help="check a policy file")
    pol_sub = pol.add_subparsers(dest="policy_command", required=True)
    p = pol_sub.add_parser(
        "check", parents=[common],
        help="report each error with its line and field; exit 1 if any (docs/policy.md)",
    )
    p.add_argument("file", nargs="?", help="the policy file (default: <home>/policy.toml)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_policy_check)

    p = sub.add_parser("mcp", parents=[common], help="serve MCP: over stdio for one token, "
                       "or streamable HTTP (--http) with a bearer token on every request")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--repo", help="the git repository (the engine runs in this process)")
    where.add_argument("--engine", metavar="unix:PATH|http://HOST:PORT",
                       help="a separate engine (chit engine serve); this edge holds no keys")
    p.add_argument("--token-file", help="file holding the token (else $CHIT_TOKEN)")
    p.add_argument("--read-only", action="store_true",
                   help="offer only read-only tools; every other call fails with engine_frozen")
    p.add_argument("--http", metavar="HOST:PORT",
                   help="serve streamable HTTP at http://HOST:PORT/mcp (loopback; port 0 picks "
                   "one) instead of stdio (docs/http.md)")
    p.add_argument("--unsafe-non-loopback", action="store_true",
                   help="with --http, allow a non-loopback HOST (put TLS in front)")
    p.add_argument("--allowed-host", action="append", metavar="NAME:PORT",
                   help="with --http, another accepted Host header (repeatable)")
    p.add_argument("--public-url", metavar="URL",
                   help="with --http, the origin agents use when a proxy is in front")
    p.add_argument("--watch-interval", type=float, default=2.0, metavar="SECONDS",
                   help="with --http, how often connected tokens' offers are re-checked "
                   "for tools/list_changed (default 2)")
    p.add_argument("--authorization-server", metavar="URL",
                   help="with --http, the authorization server that issues chit tokens (the "
                   "chit engine serve URL with POST /token), listed in the RFC 9728 metadata; "
                   "https, or http on loopback")
    p.set_defaults(func=cmd_mcp)

    eng = sub.add_parser(
        "engine", help="run the engine as a separate process (docs/engine-api.md)"
    ).add_subparsers(dest="engine_command", required=True)
    p = eng.add_parser("serve", parents=[common],
                       help="serve chit-engine/1 on a unix socket (0600) or loopback TCP")
    p.add_argument("--repo", required=True, help="the git repository")
    listen = p.add_mutually_exclusive_group()
    listen.add_argument("--socket", help="unix socket path (default: <home>/engine.sock)")
    listen.add_argument("--listen", metavar="HOST:PORT",
                        help="loopback TCP instead (127.0.0.1:PORT, [::1]:PORT); any local "
                        "user can connect")
    p.add_argument("--socket-group", metavar="GROUP",
                   help="let this group connect too (socket mode 0660)")
    p.add_argument("--max-request-bytes", type=int, default=16 * 1024 * 1024,
                   help="largest request body (default 16 MiB)")
    p.add_argument("--public-url", metavar="URL",
                   help="the origin clients reach this engine at (https, or http on loopback): "
                   "the issuer of its OAuth metadata (RFC 8414) and, with --listen, an "
                   "accepted Host; default: the --listen URL, none for a socket")
    p.set_defaults(func=cmd_engine_serve)

    freeze = sub.add_parser(
        "freeze", help="read-only mode for every engine on this home: on, off, status"
    ).add_subparsers(dest="freeze_command", required=True)
    p = freeze.add_parser("on", parents=[common], help="offer only read-only tools from the "
                          "next call; every other call fails with engine_frozen")
    p.add_argument("--reason", default="", help="a note kept with the mode and in the call log")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_freeze)
    p = freeze.add_parser("off", parents=[common], help="serve every tool tokens unlock again")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_freeze)
    p = freeze.add_parser("status", parents=[common], help="frozen or not, since when, why")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_freeze)

    audit = sub.add_parser("audit", help="verify provenance").add_subparsers(
        dest="audit_command", required=True
    )
    p = audit.add_parser(
        "verify", parents=[common], help="verify signed provenance on agent lanes"
    )
    p.add_argument("--repo", required=True)
    p.add_argument("lanes", nargs="*", metavar="LANE|RANGE",
                   help="lanes (agent/NAME) or ranges REV..agent/NAME; default: every lane")
    p.add_argument("--keys", help="trusted public keys (chit keys export-public); "
                   "default: the home's signing keys")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_audit_verify)
    p = audit.add_parser(
        "graph", parents=[common],
        help="the provenance graph around a commit, session or token id",
    )
    p.add_argument("handle", help="commit id (7-40 hex), session id, or token id (32 hex)")
    p.add_argument("--repo", required=True)
    p.add_argument("--keys", help="trusted public keys (chit keys export-public); "
                   "default: the home's signing keys")
    p.add_argument("--format", choices=("json", "mermaid", "dot"), default="json")
    p.set_defaults(func=cmd_audit_graph)
    log = audit.add_parser(
        "log", help="the engine's call log: verify its signed chain, show entries"
    ).add_subparsers(dest="log_command", required=True)
    p = log.add_parser("verify", parents=[common],
                       help="detect edited, deleted, inserted or reordered entries (exit 1)")
    p.add_argument("--keys", help="trusted public keys (chit keys export-public); "
                   "default: the home's signing keys")
    p.add_argument("--anchor", action="append", metavar="SEQ:HASH",
                   help="an entry and hash recorded from an earlier verify; repeatable")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_audit_log)
    p = log.add_parser("show", parents=[common], help="print entries, oldest first (unverified)")
    p.add_argument("--agent", help="only this agent ('-': tokens that did not verify)")
    p.add_argument("--since", help="unix seconds or ISO-8601 (no zone: UTC)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_audit_log)

    p = sub.add_parser(
        "demo", parents=[common], help="run chit end to end on a temporary repository"
    )
    p.add_argument("--keep", action="store_true", help="keep the temporary folder")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI.

    Args:
        argv: Arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 success, 1 a check failed (audit), 2 an error.
    """
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        status: int = args.func(args)
    except ChitError as exc:
        print(f"chit: {exc.code}: {exc.message}", file=sys.stderr)
        return EXIT_ERROR
    except ConfigurationError as exc:
        print(f"chit: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except ValueError as exc:
        # Operator input the engine refused (durations, globs, names, ids): the
        # messages are written for the operator and never carry secrets.
        print(f"chit {args.command}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:
        print(f"chit: {exc.strerror or 'I/O error'}: {exc.filename or ''}", file=sys.stderr)
        return EXIT_ERROR
    return status


if __name__ == "__main__":
    sys.exit(main())
