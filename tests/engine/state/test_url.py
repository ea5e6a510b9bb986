"""Which store a home uses: the state URL, where it comes from, and what is shown of it.

Threat: a database password shown in a message or accepted from a file others
can read; a state URL read two ways; a command that was to check writing a store.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.admin.state import migrate_state
from engine.errors import ConfigurationError, StoreError
from engine.state import SQLiteStore, parse_state_url, resolve_state_url


def test_the_url_comes_from_the_flag_the_environment_the_file_then_the_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CHIT_STATE", raising=False)
    assert resolve_state_url(tmp_path).path == tmp_path / "state.db"
    (tmp_path / "engine.toml").write_text('[state]\nurl = "sqlite:///srv/from-file.db"\n')
    assert resolve_state_url(tmp_path).path == Path("/srv/from-file.db")
    monkeypatch.setenv("CHIT_STATE", "sqlite:///srv/from-env.db")
    assert resolve_state_url(tmp_path).path == Path("/srv/from-env.db")
    assert resolve_state_url(tmp_path, "sqlite:///srv/flag.db").path == Path("/srv/flag.db")
    monkeypatch.setenv("CHIT_STATE", "  ")  # blank: as if unset
    assert resolve_state_url(tmp_path).path == Path("/srv/from-file.db")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://chit:s3cret@db:5432/chit", "postgresql://chit@db:5432/chit"),
        ("postgres://chit:s3cret@db/chit?sslmode=verify-full&password=s3cret",
         "postgresql://chit@db/chit?sslmode=verify-full"),
        ("postgresql://u:s3cret@h1:5432,h2:5432/chit", "postgresql://u@h1:5432,h2:5432/chit"),
        ("postgresql:///chit?host=/run/postgresql&sslpassword=s3cret",
         "postgresql:///chit?host=/run/postgresql"),
        ("postgresql://db", "postgresql://db"),
    ],
)
def test_a_postgresql_url_is_shown_without_its_password(url: str, shown: str) -> None:
    parsed = parse_state_url(url)
    assert parsed.kind == "postgresql" and parsed.conninfo == url
    assert parsed.redacted == shown == str(parsed)
    assert "s3cret" not in repr(parsed) and "s3cret" not in str(parsed)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("", "empty"),
        ("/srv/state.db", "not a bare path"),
        ("sqlite://relative/state.db", "absolute path"),
        ("sqlite:////double", "absolute path"),
        ("mysql://db/chit", "unknown state URL scheme 'mysql'"),
        ("sqlite:///srv/a%00b.db", "NUL"),
        ("postgresql://db/chit#fragment", "malformed"),
        ("postgresql://db/chit\nx", "one line"),
    ],
)
def test_an_unusable_url_is_refused_with_its_source(url: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=says) as refused:
        parse_state_url(url, source="$CHIT_STATE")
    assert str(refused.value).startswith("$CHIT_STATE: ")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[state\n", "not valid TOML"),
        ('[state]\nurl = "sqlite:///x.db"\nextra = 1\n', "holds only url"),
        ("[state]\nurl = 5\n", "is a string"),
        ('state = "sqlite:///x.db"\n', "holds only url"),
    ],
)
def test_an_unusable_engine_toml_is_refused(tmp_path: Path, text: str, says: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHIT_STATE", raising=False)
    (tmp_path / "engine.toml").write_text(text)
    with pytest.raises(ConfigurationError, match=says):
        resolve_state_url(tmp_path)


def test_a_password_in_an_engine_toml_others_can_read_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Threat: the database password in a file every local user can read."""
    monkeypatch.delenv("CHIT_STATE", raising=False)
    settings = tmp_path / "engine.toml"
    settings.write_text('[state]\nurl = "postgresql://chit:s3cret@db/chit"\n')
    os.chmod(settings, 0o644)
    with pytest.raises(ConfigurationError, match="chmod 600") as refused:
        resolve_state_url(tmp_path)
    assert "s3cret" not in str(refused.value)
    os.chmod(settings, 0o600)
    assert resolve_state_url(tmp_path).redacted == "postgresql://chit@db/chit"
    settings.write_text('[state]\nurl = "postgresql://chit@db/chit"\n')  # no password
    os.chmod(settings, 0o644)
    assert resolve_state_url(tmp_path).kind == "postgresql"


def test_a_sqlite_path_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(StoreError, match="not a regular file"):
        SQLiteStore(tmp_path / "dir.db")
    with pytest.raises(StoreError, match="not a regular file"):
        SQLiteStore("/dev/null")
    assert not Path("/dev/null-writer.lock").exists()


def test_a_migration_check_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHIT_STATE", raising=False)
    report = migrate_state(tmp_path, check=True)
    assert report["due"] is True and report["before"] == 0
    assert list(tmp_path.iterdir()) == []
    assert migrate_state(tmp_path)["version"] == report["known"]
    assert migrate_state(tmp_path, check=True)["due"] is False
