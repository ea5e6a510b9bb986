"""What an edge takes from the home: requestState keys, the ``[approvals] url`` template."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from engine import admin
from engine.admin.edgesettings import REQUEST_STATE_INFO
from engine.auth.rootkeys import Keyring
from engine.errors import ConfigurationError


def test_request_state_keys_are_derived_from_the_home_alike_in_every_process(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    admin.init_home(home)
    first, again = admin.request_state_keys(home), admin.request_state_keys(home)
    assert first.keys == again.keys and len(first.keys) == 1
    secret = Keyring(home).active()[0].secret
    expected = HKDF(algorithm=SHA256(), length=32, salt=None,
                    info=REQUEST_STATE_INFO).derive(secret)
    assert first.keys[0] == expected
    # Threat: a derived key that is the root key would let an edge mint tokens.
    assert first.keys[0] != secret


def test_request_state_keys_rotate_with_the_root_keys_and_hide_in_reprs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    admin.init_home(home)
    old = admin.request_state_keys(home).keys[0]
    admin.rotate_key(home)
    keys = admin.request_state_keys(home)
    assert len(keys.keys) == 2 and keys.keys[1] == old and keys.keys[0] != old
    # Threat: a key printed in a log or a traceback.
    assert old.hex() not in repr(keys) and repr(old) not in repr(keys)


def test_request_state_keys_need_a_keyring(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError):
        admin.request_state_keys(tmp_path / "nothing")


def _toml(home: Path, text: str) -> Path:
    home.mkdir(exist_ok=True)
    (home / "engine.toml").write_text(text, encoding="utf-8")
    return home


def test_without_engine_toml_or_table_there_is_no_template(tmp_path: Path) -> None:
    assert admin.approval_url_template(tmp_path / "none") is None
    assert admin.approval_url_template(_toml(tmp_path / "h", "[state]\n")) is None
    assert admin.approval_url_template(_toml(tmp_path / "h", "[approvals]\n")) is None


@pytest.mark.parametrize("url", [
    "https://approvals.example.org/a/{id}",
    "https://approvals.example.org/view?approval={id}&x=1",
    "http://127.0.0.1:8080/approvals/{id}",
    "http://localhost/{id}",
])
def test_a_good_template_is_returned(tmp_path: Path, url: str) -> None:
    home = _toml(tmp_path / "h", f'[approvals]\nurl = "{url}"\n')
    assert admin.approval_url_template(home) == url


@pytest.mark.parametrize("url", [
    "https://approvals.example.org/a",  # no {id}
    "https://approvals.example.org/{id}/{id}",
    "http://approvals.example.org/{id}",  # clear text off loopback
    "https://user:pw@approvals.example.org/{id}",
    "https://approvals.example.org/{id}#frag",
    "https://{id}.example.org/",
    "https://approvals.example.org/{id}/{other}",
    "javascript:alert(1)//{id}",
    "https://approvals.example.org/<{id}>",
    "ftp://approvals.example.org/{id}",
])
def test_a_bad_template_is_refused(tmp_path: Path, url: str) -> None:
    home = _toml(tmp_path / "h", f'[approvals]\nurl = "{url}"\n')
    with pytest.raises(ConfigurationError, match=r"\[approvals\] url"):
        admin.approval_url_template(home)


def test_an_approvals_table_holds_only_url(tmp_path: Path) -> None:
    home = _toml(tmp_path / "h", '[approvals]\nurl = "https://a.example/{id}"\nttl = 5\n')
    with pytest.raises(ConfigurationError, match="holds only url"):
        admin.approval_url_template(home)
    home = _toml(tmp_path / "h", "[approvals]\nurl = 5\n")
    with pytest.raises(ConfigurationError):
        admin.approval_url_template(home)
