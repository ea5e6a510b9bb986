"""Which state store an engine or command uses: the state URL and where it comes from.

``--state URL``, else ``$CHIT_STATE``, else ``[state] url`` in
``<home>/engine.toml``, else ``sqlite://<home>/state.db`` (docs/deployment.md,
"Choosing the store"). A URL may carry a password; it is kept out of every
``repr``, message and log line, which show :attr:`StateURL.redacted`.
"""

from __future__ import annotations

import os
import tomllib
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from engine.errors import ConfigurationError

__all__ = [
    "ENGINE_TOML",
    "STATE_ENV",
    "StateURL",
    "parse_state_url",
    "read_engine_toml",
    "resolve_state_url",
]

STATE_ENV = "CHIT_STATE"
"""The environment variable naming the state URL when ``--state`` is not given."""
ENGINE_TOML = "engine.toml"
"""The engine's settings file in the home: ``[state]`` may name ``url``; ``[[repo]]`` tables
name repositories (engine/service/repos.py)."""

_MAX_URL_CHARS = 4096
_ENGINE_TOML_BYTES = 1024 * 1024
_PG_SCHEMES = ("postgresql", "postgres")


@dataclass(frozen=True)
class StateURL:
    """A parsed state URL.

    Attributes:
        kind: ``"sqlite"`` or ``"postgresql"``.
        path: The database file, for SQLite.
        redacted: The URL with any password removed: what messages show.
        conninfo: The libpq connection URL as given (PostgreSQL), which may hold
            a password; never shown.
    """

    kind: Literal["sqlite", "postgresql"]
    redacted: str
    path: Path | None = None
    conninfo: str = field(default="", repr=False)

    def __repr__(self) -> str:
        return f"StateURL({self.redacted!r})"

    def __str__(self) -> str:
        return self.redacted


def parse_state_url(text: str, *, source: str = "--state") -> StateURL:
    """Parse a state URL.

    Forms: ``sqlite:///ABSOLUTE/PATH`` (the path after ``sqlite://``), and a
    libpq connection URL ``postgresql://[user[:password]@][host][:port][/dbname][?param=value&...]``
    (``postgres://`` too; PostgreSQL's documentation, "Connection URIs").
    Credentials may also come from ``PGPASSFILE`` or ``PGPASSWORD``, as libpq
    reads them.

    Args:
        text: The URL.
        source: Where it came from, named in the error (``--state``,
            ``$CHIT_STATE``, ``engine.toml``).

    Returns:
        The parsed URL.

    Raises:
        ConfigurationError: If the URL is of another scheme, malformed, or a
            SQLite path is not absolute. The message never repeats a password.
    """
    if not isinstance(text, str) or not text.strip():
        raise ConfigurationError(f"{source}: the state URL is empty")
    text = text.strip()
    if len(text) > _MAX_URL_CHARS or any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise ConfigurationError(f"{source}: the state URL is not one line of at most "
                                 f"{_MAX_URL_CHARS} characters")
    scheme, sep, rest = text.partition("://")
    scheme = scheme.lower()
    if not sep:
        raise ConfigurationError(
            f"{source}: a state URL is sqlite:///PATH or postgresql://..., not a bare path"
        )
    if scheme == "sqlite":
        if not rest.startswith("/") or rest.startswith("//"):
            raise ConfigurationError(
                f"{source}: a SQLite state URL names an absolute path: sqlite:///srv/chit/state.db"
            )
        decoded = urllib.parse.unquote(rest.partition("?")[0])
        if "\x00" in decoded:
            raise ConfigurationError(f"{source}: the SQLite path holds a NUL character")
        path = Path(decoded)
        return StateURL("sqlite", "sqlite://" + str(path), path=path)
    if scheme in _PG_SCHEMES:
        return StateURL("postgresql", _redact(text, source), conninfo=text)
    shown = scheme if scheme.isascii() and scheme.isalnum() and len(scheme) <= 20 else "?"
    raise ConfigurationError(
        f"{source}: unknown state URL scheme {shown!r}; use sqlite:///PATH or postgresql://..."
    )


def _redact(text: str, source: str) -> str:
    """The PostgreSQL URL without a password in its user part or its query.

    Built by hand, not by :mod:`urllib`'s split, which refuses libpq's
    several-host form (``host1:5432,host2:5432``) and drops the ``//`` of a URL
    with no host (``postgresql:///db?host=/run/postgresql``).
    """
    rest = text.partition("://")[2]
    if "#" in rest:
        raise ConfigurationError(f"{source}: the PostgreSQL state URL is malformed")
    before_query, _, query = rest.partition("?")
    netloc, slash, path = before_query.partition("/")
    if "@" in netloc:
        user, _, hosts = netloc.rpartition("@")
        netloc = user.partition(":")[0] + "@" + hosts
    try:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ConfigurationError(f"{source}: the PostgreSQL state URL is malformed") from None
    kept = [(k, v) for k, v in pairs if k.lower() not in ("password", "sslpassword")]
    shown = "postgresql://" + netloc + slash + path
    return shown + ("?" + urllib.parse.urlencode(kept, safe="/") if kept else "")


def resolve_state_url(home: str | os.PathLike[str], explicit: str | None = None) -> StateURL:
    """The state URL an engine or command on ``home`` uses.

    Args:
        home: The chit home.
        explicit: ``--state``, if given.

    Returns:
        ``explicit``, else ``$CHIT_STATE``, else ``[state] url`` of
        ``<home>/engine.toml``, else ``<home>/state.db`` on SQLite.

    Raises:
        ConfigurationError: If the chosen URL is unusable, or ``engine.toml``
            is unreadable, not TOML, or its ``[state]`` table holds anything
            but a string ``url``.
    """
    if explicit is not None:
        return parse_state_url(explicit, source="--state")
    env = os.environ.get(STATE_ENV)
    if env is not None and env.strip():
        return parse_state_url(env, source=f"${STATE_ENV}")
    configured = _from_engine_toml(Path(home) / ENGINE_TOML)
    if configured is not None:
        return parse_state_url(configured, source=ENGINE_TOML)
    path = Path(home) / "state.db"
    return StateURL("sqlite", "sqlite://" + str(path), path=path)


def read_engine_toml(path: Path) -> dict[str, Any] | None:
    """The settings of ``<home>/engine.toml``, or ``None`` if there is no such file.

    Args:
        path: The file.

    Returns:
        The parsed TOML document.

    Raises:
        ConfigurationError: If it is unreadable, over 1 MiB, not UTF-8 or not TOML.
    """
    read = _read_engine_toml(path)
    return None if read is None else read[0]


def _read_engine_toml(path: Path) -> tuple[dict[str, Any], int] | None:
    try:
        with open(path, "rb") as fh:
            raw = fh.read(_ENGINE_TOML_BYTES + 1)
            mode = os.fstat(fh.fileno()).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror}") from None
    if len(raw) > _ENGINE_TOML_BYTES:
        raise ConfigurationError(f"{path} is larger than 1 MiB")
    try:
        settings = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigurationError(f"{path} is not UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        # tomllib's messages name a position, never the file's text.
        raise ConfigurationError(f"{path} is not valid TOML: {exc}") from None
    return settings, mode


def _from_engine_toml(path: Path) -> str | None:
    read = _read_engine_toml(path)
    if read is None:
        return None
    settings, mode = read
    state = settings.get("state")
    if state is None:
        return None
    if not isinstance(state, dict) or set(state) - {"url"}:
        raise ConfigurationError(f"{path}: [state] holds only url = \"...\"")
    url = state.get("url")
    if url is None:
        return None
    if not isinstance(url, str):
        raise ConfigurationError(f"{path}: [state] url is a string")
    if mode & 0o077 and _holds_password(url):
        # As for key files: a secret others can read is refused, not used.
        raise ConfigurationError(
            f"{path} holds a database password and group or others can read it: chmod 600 "
            "it, or keep the password in a password file (PGPASSFILE)"
        )
    return url


def _holds_password(url: str) -> bool:
    """Whether a state URL carries a password (in its user part or its query)."""
    rest = url.partition("://")[2]
    before_query, _, query = rest.partition("?")
    netloc = before_query.partition("/")[0]
    if "@" in netloc and ":" in netloc.rpartition("@")[0]:
        return True
    return any(k.lower() in ("password", "sslpassword")
               for k, _ in urllib.parse.parse_qsl(query, keep_blank_values=True))
