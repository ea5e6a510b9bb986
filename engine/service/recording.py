"""Every ``invoke``, allowed or refused, recorded in the call log.

The entry names the caller as far as the call established it, the redacted
arguments, the decision and its code (docs/audit.md §8; the format:
``engine.audit.calllog``). Calls that change state are durable before they are
answered, though after their change (a kill in between leaves, say, a commit
with no entry: docs/audit.md §8); read-only calls and refusals are queued
(engine/service/logwriter.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from engine.audit import calllog, redact
from engine.catalog.declarations import tool_by_name
from engine.service.answers import CallAnswer, Called, Refused
from engine.service.check import Checked
from engine.service.logwriter import LogWriter

__all__ = ["CallFacts", "Recorder"]

logger = logging.getLogger("chit.engine")

_UNRECORDED = Refused(
    "internal_error",
    "the engine could not record this call; check `status` before retrying",
)


@dataclass
class CallFacts:
    """What a call established before it ended, for its call-log entry."""

    checked: Checked | None = None


class Recorder:
    """Records calls in the call log through the engine's writer.

    Args:
        writer: The engine's call-log writer.
        protects: Whether a path is protected (its content is never logged, even hashed).
        policy_hash: The newest loaded policy's hash, for calls refused before
            their own policy was read.
        now: The current time in unix seconds.
    """

    def __init__(
        self,
        writer: LogWriter,
        protects: Callable[[str], bool],
        policy_hash: Callable[[], str],
        now: Callable[[], int],
    ) -> None:
        self._writer = writer
        self._protects = protects
        self._policy_hash = policy_hash
        self._now = now

    def __repr__(self) -> str:
        return "Recorder()"

    def record(
        self,
        answer: CallAnswer,
        facts: CallFacts,
        tool: object,
        arguments: object,
        session: object,
        *,
        repo: str | None = None,
        asked: object = None,
    ) -> CallAnswer:
        """Record the call in the call log; durable first if it may have changed state.

        A call is durable before it is answered unless it was refused, or was
        allowed (or failed) on a read-only tool: those entries are queued.

        Args:
            answer: The call's answer.
            facts: What the call established (its checked token, if it got so far).
            tool: The tool name as the client sent it (redacted if odd).
            arguments: The arguments as sent (redacted: sizes and digests of contents).
            session: The session id as sent (redacted if odd).
            repo: The repository the call named, if it is a valid name (or the
                engine's only one when it named none).
            asked: The repository's name as sent, recorded redacted when
                ``repo`` is ``None`` (absent when nothing was sent).

        Returns:
            ``answer``, or ``internal_error`` if the entry could not be written
            (the call's effect, if any, stands).
        """
        checked = facts.checked
        code = None if isinstance(answer, Called) else answer.code
        if checked is not None and checked.repo is not None:
            repo = checked.repo.name
        elif repo is None and asked is not None:
            repo = redact.redact_label(asked)
        record = calllog.CallRecord(
            time=self._now(),
            agent=checked.token.agent if checked else calllog.UNKNOWN_AGENT,
            chain=tuple(block for block, _agent in checked.token.chain) if checked else (),
            session=redact.redact_label(session),
            tool=redact.redact_label(tool),
            arguments=redact.redact_arguments(arguments, self._protects),
            decision="allowed" if code is None else (
                "failed" if code == "internal_error" else "refused"
            ),
            code=code,
            policy_hash=checked.policy.hash if checked and checked.policy else self._policy_hash(),
            catalog_hash=checked.offer.catalog_hash if checked else None,
            repo=repo,
        )
        spec = tool_by_name(tool) if isinstance(tool, str) else None
        durable = record.decision != "refused" and not (spec is not None and spec.read_only)
        try:
            self._writer.write(record, durable=durable)
        except Exception:
            logger.exception("the call log could not be written; run `chit audit log verify`")
            return _UNRECORDED
        return answer
