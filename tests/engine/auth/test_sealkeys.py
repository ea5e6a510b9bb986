"""Sealing keys (engine/auth/sealkeys.py; keys/README.md, docs/sealing.md).

Threat: sealing keys readable from disk, exported, listed or printed with their
secret, or replaced by a re-run of ``chit init``.
"""

from __future__ import annotations

import json
import os
import shutil
import stat

import pytest

from engine import admin
from engine.auth import _keyfiles, sealkeys
from engine.errors import ConfigurationError
from engine.service import Engine
from tests.conftest import World


def test_init_creates_one_sealing_key_and_is_idempotent(world: World) -> None:
    """Threat: key theft from disk (modes), or a re-run of init replacing the key."""
    folder = world.home / "keys" / "sealing"
    files = list(folder.glob("*.json"))
    assert len(files) == 1
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600
    doc = json.loads(files[0].read_text())
    assert doc["alg"] == "aes-256-gcm" and doc["status"] == "active"
    assert doc["kid"] == files[0].stem and doc["kid"].startswith("s")
    assert len(_keyfiles.unb64(doc["secret"])) == 32
    again = admin.init_home(world.home)
    assert again["sealing_key_id"] == doc["kid"] and list(folder.glob("*.json")) == files
    # An older home (no sealing folder yet) gets its key from init, keeping the rest.
    shutil.rmtree(folder)
    root_before = sorted(p.name for p in (world.home / "keys" / "root").glob("*.json"))
    added = admin.init_home(world.home)
    assert len(list(folder.glob("*.json"))) == 1 and added["sealing_key_id"] != doc["kid"]
    assert sorted(p.name for p in (world.home / "keys" / "root").glob("*.json")) == root_before


def test_sealing_keys_never_leave_the_keyring(world: World) -> None:
    """Threat: a sealing key exported, listed or printed with its secret."""
    ring = sealkeys.SealingKeyring(world.home)
    active = ring.active()
    assert active.secret.hex() not in repr(active) and "secret" not in repr(ring)
    exported = json.dumps(admin.export_public(world.home))
    assert active.key_id not in exported
    listed = admin.list_keys(world.home)
    sealing_rows = [k for k in listed if k["kind"] == "sealing"]
    assert [k["kid"] for k in sealing_rows] == [active.key_id] and sealing_rows[0]["signing"]
    assert _keyfiles.b64(active.secret) not in json.dumps(listed)


def test_a_group_readable_sealing_key_is_refused(world: World) -> None:
    path = next((world.home / "keys" / "sealing").glob("*.json"))
    os.chmod(path, 0o640)
    with pytest.raises(ConfigurationError, match="chmod 600"):
        sealkeys.SealingKeyring(world.home)
    with pytest.raises(ConfigurationError):
        Engine(world.home, world.repo)


def test_engine_refuses_to_start_without_a_sealing_key(world: World) -> None:
    shutil.rmtree(world.home / "keys" / "sealing")
    with pytest.raises(ConfigurationError, match="chit init"):
        Engine(world.home, world.repo)
