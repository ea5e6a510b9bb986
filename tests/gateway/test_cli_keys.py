"""``chit keys list`` and ``retire``: every id the list shows is one retire understands."""

from __future__ import annotations

import json
import re
import subprocess

from tests.conftest import World


def _chit(world: World, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*world.cli(), *args], capture_output=True, text=True, timeout=60,
                          check=False)


def _listed(world: World) -> dict[str, dict[str, object]]:
    out = _chit(world, "keys", "list", "--json")
    assert out.returncode == 0, out.stderr
    return {key["kid"]: key for key in json.loads(out.stdout)}


def test_every_listed_id_is_understood_by_retire(world: World) -> None:
    assert _chit(world, "keys", "rotate", "--sealing").returncode == 0
    assert _chit(world, "keys", "rotate", "--signing").returncode == 0
    keys = _listed(world)
    by_role = {(k["kind"], k["status"], k["signing"]): kid for kid, k in keys.items()}
    human = _chit(world, "keys", "list").stdout
    for kid, key in keys.items():  # kind, status and creation time (ISO 8601, UTC) shown
        line = next(ln for ln in human.splitlines() if ln.startswith(kid))
        assert str(key["kind"]) in line and str(key["status"]) in line
        assert re.search(r" \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", line)
    answers = {kid: _chit(world, "keys", "retire", kid) for kid in keys}
    for out in answers.values():
        assert "no such key id" not in out.stderr and "Traceback" not in out.stderr
    # The older sealing key retires; the one that seals, the last root key and
    # the signing keys are refused with what to run instead.
    older_sealer = by_role[("sealing", "active", False)]
    assert answers[older_sealer].returncode == 0
    assert _listed(world)[older_sealer]["status"] == "retired"
    refused = {kid: out.stderr for kid, out in answers.items() if kid != older_sealer}
    assert all(_chit(world, "keys", "retire", kid).returncode == 2 for kid in refused)
    assert "rotate --sealing" in refused[by_role[("sealing", "active", True)]]
    assert "rotate --signing" in refused[by_role[("signing", "active", True)]]
    assert "already retired" in refused[by_role[("signing", "retired", False)]]
    assert "last active key" in refused[by_role[("root", "active", True)]]
    unknown = _chit(world, "keys", "retire", "r20990101-deadbeef")
    assert unknown.returncode == 2 and "no such key id" in unknown.stderr
