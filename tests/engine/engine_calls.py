"""One way for tests to drive the in-process engine as an edge does: list, call, land.

:func:`call` lists the token's catalog, then invokes a tool presenting that
catalog's hash (or presents the hash it is given); :func:`ok`, :func:`error` and
:func:`refusal` read the answer; :func:`land` stages files and commits them on
the token's lane. :class:`Caller` is :func:`call` with a test file's own session
naming, and :class:`EngineCalls` the same over ``self.engine``. Tests of the MCP
edges drive real clients instead (tests/gateway/mcp_client.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.service import Engine
from engine.service.answers import CallAnswer

LIST = "listed"
"""The ``listed`` argument that makes a call list the token's catalog first."""


def token_session(session: str, token: str, digits: int = 12) -> str:
    """A session name of one token's own, so two tokens never share a session by accident.

    Args:
        session: The name to extend.
        token: The token's text form.
        digits: How many hex digits of the token's SHA-256 to append.

    Returns:
        ``<session>-<hex>``.
    """
    return f"{session}-{hashlib.sha256(token.encode()).hexdigest()[:digits]}"


@dataclass(frozen=True)
class Caller:
    """How one test file's edge calls the engine: list the token's catalog, then invoke.

    Attributes:
        session: The session of a call that names none: a name, or a function
            of the token giving one.
        per_token: ``0`` to send session names as they are; otherwise every
            name becomes :func:`token_session` of it with this many digits.
        through: Runs the invoke, handed it as a function of no arguments (for
            example under a timeout guard); ``None`` runs it directly. The
            listing never runs through it.
    """

    session: str | Callable[[str], str] = "s1"
    per_token: int = 0
    through: Callable[[Callable[[], CallAnswer]], CallAnswer] | None = None

    def session_for(self, token: str, session: str | None = None) -> str:
        """The session id a call of ``token`` sends, given the name the test chose (if any)."""
        if session is None:
            session = self.session if isinstance(self.session, str) else self.session(token)
        return token_session(session, token, self.per_token) if self.per_token else session

    def call(
        self,
        engine: Engine,
        token: str,
        tool: str,
        args: dict[str, Any] | None = None,
        session: str | None = None,
        listed: str | None = LIST,
    ) -> CallAnswer:
        """Invoke as an edge that listed the token's catalog first (unless told otherwise).

        Args:
            engine: The engine to call.
            token: The token's text form.
            tool: The tool name, as the client sends it.
            args: The tool's arguments (``None``: ``{}``).
            session: The session name (``None``: this caller's default).
            listed: :data:`LIST` to call ``offer`` first and present its catalog
                hash (``None`` if the offer is refused); otherwise the hash to
                present, without listing (``None``: the edge listed nothing).

        Returns:
            The engine's answer.
        """
        name = self.session_for(token, session)
        if listed == LIST:
            listed = engine.offer(token).get("catalog_hash")

        def invoke() -> CallAnswer:
            return engine.invoke(token, tool, args or {}, session=name, offered_catalog_hash=listed)

        return invoke() if self.through is None else self.through(invoke)

    def ok(self, engine: Engine, token: str, tool: str, args: dict[str, Any] | None = None,
           session: str | None = None) -> Any:
        """:meth:`call`, listing first, then :func:`ok` of its answer: the tool's result."""
        return ok(self.call(engine, token, tool, args, session))


call = Caller().call
"""Sessions named as given (default ``s1``), listing before every call."""


def ok(answer: Mapping[str, Any]) -> Any:
    """The result of an answer that must have succeeded.

    Raises:
        AssertionError: The answer is a refusal.
    """
    assert answer["ok"] is True, answer
    return answer["result"]


def refusal(answer: Mapping[str, Any]) -> dict[str, Any]:
    """The error object (``{"error": code, "message": ..., **hints}``) of a refusal.

    Raises:
        AssertionError: The answer succeeded.
    """
    assert answer["ok"] is False, answer
    error: dict[str, Any] = answer["error"]
    return error


def error(answer: Mapping[str, Any]) -> str:
    """The code of a refusal (as :func:`refusal`)."""
    return str(refusal(answer)["error"])


def land(
    engine: Engine,
    token: str,
    files: str | Mapping[str, str],
    *,
    path: str = "src/app.py",
    session: str = "s1",
    message: str = "change",
    list_each: bool = False,
) -> str:
    """Write files and commit them in one session, as an agent does; each call must succeed.

    Args:
        engine: The engine to call.
        token: The token's text form.
        files: Path to text content; or the text of one file, written at ``path``.
        path: Where ``files`` goes when it is one text.
        session: The session name, sent as it is.
        message: The commit message.
        list_each: List before every call; by default the edge lists once, before
            the first write, and presents that hash to every call.

    Returns:
        The new commit's id (40 hex digits).

    Raises:
        AssertionError: A write or the commit is refused.
    """
    listed = LIST if list_each else engine.offer(token).get("catalog_hash")
    for where, content in ({path: files} if isinstance(files, str) else files).items():
        ok(call(engine, token, "write_file", {"path": where, "content": content}, session, listed))
    return str(ok(call(engine, token, "commit", {"message": message}, session, listed))["commit"])


class EngineCalls:
    """``call`` and ``ok`` over ``self.engine``, one session per token.

    A session name is made per token (``<session>-<token hash prefix>``, see
    :func:`token_session`), so two tokens never share a session by accident.
    """

    engine: Engine
    default_session = "s"

    def call(self, token: str, tool: str, args: dict[str, Any], session: str | None = None) -> Any:
        caller = Caller(self.default_session, per_token=12)
        return caller.call(self.engine, token, tool, args, session)

    def ok(self, token: str, tool: str, args: dict[str, Any], session: str | None = None) -> Any:
        return ok(self.call(token, tool, args, session))
