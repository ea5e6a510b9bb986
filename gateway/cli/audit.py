"""``chit audit verify|graph`` and ``chit audit log verify|show|checkpoint|prove``.

``chit audit export|attest-lane`` are in :mod:`gateway.cli.attest`.

The verifying commands trust the keys of ``--keys FILE`` (``chit keys
export-public``), else the home's own, and exit 1 when a check fails. What is
checked is in docs/audit.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from gateway.cli._output import EXIT_FAILED, EXIT_OK, print_json, term, when
from gateway.cli._trusted import public_keys
from gateway.cli.attest import add_attest

if TYPE_CHECKING:
    from argparse import _SubParsersAction

__all__ = ["add_audit"]

def add_audit(
    sub: _SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``chit audit`` and its subcommands to ``sub``."""
    audit = sub.add_parser("audit", help="verify provenance").add_subparsers(
        dest="audit_command", required=True
    )
    p = audit.add_parser(
        "verify", parents=[common], help="verify signed provenance on agent lanes"
    )
    p.add_argument("--repo", required=True,
                   help="the repository: the engine's, or a mirror clone of its remote "
                   "(docs/audit.md)")
    p.add_argument("--base", help="the base branch (default: the branch HEAD names)")
    p.add_argument("lanes", nargs="*", metavar="LANE|RANGE",
                   help="lanes (agent/NAME) or ranges REV..agent/NAME; default: every lane "
                   "(none with --merged)")
    p.add_argument("--merged", action="store_true",
                   help="also audit the base branch's history: chit commits that reached it "
                   "by fast-forward, merge, squash or rebase (docs/audit.md)")
    p.add_argument("--since", metavar="REV",
                   help="with --merged: audit only REV..BASE (a branch or commit id)")
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
    add_attest(audit, common)
    log = audit.add_parser(
        "log", help="the engine's call log: verify it, show entries, checkpoints and proofs"
    ).add_subparsers(dest="log_command", required=True)
    keys_help = "trusted public keys (chit keys export-public); default: the home's signing keys"
    p = log.add_parser("verify", parents=[common],
                       help="detect edited, deleted, inserted or reordered entries (exit 1)")
    p.add_argument("--keys", help=keys_help)
    p.add_argument("--checkpoint", action="append", metavar="FILE",
                   help="a checkpoint kept elsewhere the log must still match; repeatable")
    p.add_argument("--anchor", action="append", metavar="SEQ:HASH",
                   help="an entry and hash recorded from an earlier verify; repeatable")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_audit_log)
    p = log.add_parser("checkpoint", parents=[common],
                       help="print the newest signed checkpoint (or, with --key, the "
                       "log's verifier keys)")
    p.add_argument("--keys", help=keys_help)
    p.add_argument("--key", action="store_true",
                   help="print the verifier keys in the note form <origin>+<hash>+<key>")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_audit_log_checkpoint)
    p = log.add_parser("prove", parents=[common],
                       help="an inclusion proof of an entry, or a consistency proof")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--entry", type=int, metavar="N", help="the entry to prove included")
    what.add_argument("--consistency", nargs=2, metavar=("OLD", "NEW"),
                      help="two checkpoints (files, or tree sizes of stored ones)")
    p.add_argument("--checkpoint", metavar="FILE",
                   help="the checkpoint to prove --entry against (default: the newest)")
    p.add_argument("--keys", help=keys_help)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_audit_log_prove)
    p = log.add_parser("show", parents=[common], help="print entries, oldest first (unverified)")
    p.add_argument("--agent", help="only this agent ('-': tokens that did not verify)")
    p.add_argument("--since", help="unix seconds or ISO-8601 (no zone: UTC)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_audit_log)


def cmd_audit_verify(args: argparse.Namespace) -> int:
    from engine import admin
    from engine.service import reporting
    from gateway.cli.progress import Bar

    if args.since is not None and not args.merged:
        raise ValueError("--since needs --merged")
    bar = Bar(enabled=False if args.json else None)  # on a terminal only
    try:
        with reporting(bar):
            report = admin.verify_lanes(args.repo, args.lanes or None,
                                        public_keys=public_keys(args), base=args.base,
                                        merged=args.merged, since=args.since)
    finally:
        bar.close()
    if args.json:
        print_json(report)
    else:
        for item in report["commits"]:
            mark = "ok  " if item["ok"] else "FAIL"
            print(f"{mark} {item['commit'][:12]} {term(item['lane'])} catalog "
                  f"{item['catalog_hash']}" + _via(item))
            if "approval" in item:
                approval = item["approval"]
                print(f"     approved {approval['id']} by {term(approval['operator'])} at "
                      f"{when(approval['decided_at'])}")
        for finding in report["findings"]:
            print(f"  {finding['commit'][:12]} {finding['check']}: {finding['reason']}")
        if "base" in report:
            _print_base(report["base"])
        total = len(report["commits"])
        good = sum(1 for c in report["commits"] if c["ok"])
        lanes = ", ".join(report["lanes"] + ([report["base"]["branch"]] if "base" in report
                                             else [])) or "no lanes"
        verdict = "verified" if report["ok"] else "FAILED"
        findings = len(report["findings"])
        print(f"{verdict}: {good}/{total} commits on {lanes}; {findings} findings")
    return EXIT_OK if report["ok"] else EXIT_FAILED


def _via(item: dict[str, Any]) -> str:
    """How a verified commit reached the base (nothing for a commit still on its lane)."""
    extra = " (record only: the commit is gone)" if item.get("record_only") else ""
    match item.get("via"):
        case "fast-forward":
            return " via fast-forward"
        case "merge":
            return f" via merge {item['merge'][:12]}"
        case "squash":
            return f" via squash {item['squash'][:12]}{extra}"
        case "rebase":
            return f" rebased as {item['copy'][:12]}: per-commit provenance lost{extra}"
    return ""


def _print_base(base: dict[str, Any]) -> None:
    """Squashes, rebased copies, merges and the count of commits that are not chit's."""
    for s in base["squashes"]:
        up_to = s["up_to"][:12] if s["up_to"] else "?"
        how = "tree matches" if s["matched"] == "tree" else "message names it"
        content = s["content"] + (": " + ", ".join(term(p) for p in s["differs"])
                                  if s["differs"] else "")
        print(f"squash {s['commit'][:12]} of {term(s['lane'])} up to {up_to} ({how}); "
              f"content {content}; lane verified from {s['verified']}")
    for r in base["rebased"]:
        print(f"rebased {r['commit'][:12]} is a copy of {r['original'][:12]} on "
              f"{term(r['lane'])}: per-commit provenance lost; change {r['change']}")
    for m in base["merges"]:
        if m["commits"]:
            print(f"merge {m['commit'][:12]} brought {len(m['commits'])} chit commit(s)")
    since = f" since {term(base['since'])}" if base["since"] else ""
    print(f"{len(base['not_chit'])} of {base['walked']} commits on {term(base['branch'])}"
          f"{since} are not chit's (not checked)")


def cmd_audit_graph(args: argparse.Namespace) -> int:
    from engine import admin

    repo = admin.open_repository(args.repo)
    found, unverified, truncated = admin.provenance_graph(
        repo, args.handle.strip(), public_keys(args)
    )
    if truncated:
        print(f"note: only the first {admin.LIMITS.graph_commits} lane commits were read",
              file=sys.stderr)
    if args.format == "json":
        print_json(found | {"unverified": unverified, "truncated": truncated})
    else:
        sys.stdout.write(admin.render_graph(found, args.format))
    if unverified:
        print(f"note: {unverified} lane commit(s) without verified provenance were left out; "
              "run `chit audit verify`", file=sys.stderr)
    return EXIT_OK


def cmd_audit_log(args: argparse.Namespace) -> int:
    from engine import admin

    home = admin.resolve_home(args.home)
    if args.log_command == "show":
        since = admin.parse_since(args.since) if args.since else None
        entries = admin.call_log_entries(home, agent=args.agent, since=since,
                                         state=args.state)
        if args.json:
            print_json(list(entries))
            return EXIT_OK
        for e in entries:
            if "undecodable" in e:
                print(f"{e['seq']:>7} (undecodable: {e['undecodable']})")
                continue
            outcome = e["decision"] + (f":{e['code']}" if e["code"] else "")
            arguments = json.dumps(e["arguments"], sort_keys=True, separators=(",", ":"))
            repo = f" repo={term(e['repo'])}" if "repo" in e else ""
            print(f"{e['seq']:>7} {when(e['time'])} {term(e['agent'])} {term(e['tool'])} "
                  f"{term(outcome)} session={term(e['session'])}{repo} "
                  + arguments.replace("\x7f", "\\u007f"))
        return EXIT_OK
    anchors = dict(admin.parse_anchor(a) for a in args.anchor or ())
    given = [admin.read_checkpoint_file(f) for f in args.checkpoint or ()]
    report = admin.verify_call_log(home, public_keys(args), anchors=anchors, given=given,
                                   state=args.state)
    if args.json:
        print_json(report)
    else:
        for f in report["findings"]:
            where = f"entry {f['seq']}" if f["seq"] is not None else "log"
            print(f"{where} {f['check']}: {f['reason']}")
        head, signed, unsigned = report["head"], report["checkpoint"], report["unsigned"]
        at = f"; head {head['seq']}:{head['hash']}" if head else ""
        if signed:
            at += f"; checkpoint of {signed['size']} entries"
        if unsigned:
            span = (f"entry {unsigned['first']} is" if unsigned["first"] == unsigned["last"]
                    else f"entries {unsigned['first']}..{unsigned['last']} are")
            at += f"; {span} chained but not yet signed"
        if report["ok"]:
            print(f"verified: {report['entries']} entries{at}")
        else:
            print(f"FAILED: {report['entries']} entries; {len(report['findings'])} findings")
    return EXIT_OK if report["ok"] else EXIT_FAILED


def cmd_audit_log_checkpoint(args: argparse.Namespace) -> int:
    from engine import admin

    home = admin.resolve_home(args.home)
    if args.key:
        keys = admin.call_log_verifier_keys(home, public_keys(args), state=args.state)
        if args.json:
            print_json({"verifier_keys": keys})
        else:
            print("\n".join(keys))
        return EXIT_OK
    found = admin.call_log_checkpoint(home, public_keys(args), state=args.state)
    if args.json:
        print_json(found)
    else:
        sys.stdout.write(found["note"])
    return EXIT_OK


def _checkpoint_arg(text: str) -> str | int:
    from engine import admin

    return int(text) if text.isdecimal() and len(text) <= 18 else admin.read_checkpoint_file(text)


def cmd_audit_log_prove(args: argparse.Namespace) -> int:
    from engine import admin

    home = admin.resolve_home(args.home)
    keys = public_keys(args)
    if args.consistency:
        old, new = (_checkpoint_arg(a) for a in args.consistency)
        found = admin.prove_consistency(home, keys, old, new, state=args.state)
        if args.json:
            print_json(found)
        else:
            print(f"consistency of the tree of {found['old_size']} entries with the tree of "
                  f"{found['new_size']}")
            print(f"old root  {found['old_root']}")
            print(f"new root  {found['new_root']}")
            _print_proof(found["proof"])
        return EXIT_OK
    checkpoint = admin.read_checkpoint_file(args.checkpoint) if args.checkpoint else None
    found = admin.prove_inclusion(home, keys, args.entry, checkpoint, state=args.state)
    if args.json:
        print_json(found)
    else:
        print(f"entry {found['entry']} (leaf {found['leaf_index']}) in the tree of "
              f"{found['tree_size']} entries")
        print(f"leaf hash {found['leaf_hash']}")
        print(f"root      {found['root']}")
        _print_proof(found["proof"])
    return EXIT_OK


def _print_proof(hashes: list[str]) -> None:
    """The proof's hashes, one a line, the first labelled ``proof``."""
    for i, h in enumerate(hashes):
        print(f"{'proof' if i == 0 else '':<9} {h}")
