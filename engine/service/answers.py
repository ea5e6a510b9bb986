"""The engine's answers to ``offer`` and ``invoke``, typed, and their JSON form.

:class:`Offered`, :class:`Called` and :class:`Refused` are what
:class:`engine.service.Engine` returns: frozen, read by attribute at the edges,
and each also a read-only ``dict`` of exactly the JSON that ``chit-engine/1``
sends (docs/engine-api.md, "Answers"). :func:`read_offer`,
:func:`read_call` and :func:`read_refusal` turn JSON from the wire, untrusted,
back into answers; :func:`read_warning` reads ``POST /v1/warning``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal, NoReturn

from engine.errors import ChitError
from engine.limits import LIMITS

__all__ = [
    "Answer",
    "AnswerError",
    "CallAnswer",
    "Called",
    "OfferAnswer",
    "Offered",
    "OfferedTool",
    "Refused",
    "read_call",
    "read_offer",
    "read_refusal",
    "read_warning",
    "warning_of",
]


class AnswerError(ValueError):
    """JSON that is not an answer of the engine API (the message is caller-safe)."""


class Answer(dict[str, Any]):
    """Base of the engine's answers: a read-only ``dict`` holding the answer's JSON form.

    Subclasses are frozen dataclasses read by attribute; their items, filled once
    when made, are the JSON object ``chit-engine/1`` sends, sharing (never
    copying) the values the answer was made from. As a ``dict`` an answer
    compares equal to that object and ``json.dumps`` writes exactly it; every
    method that would change it raises ``TypeError``.
    """

    __slots__ = ()
    ok: ClassVar[bool]

    def _fill(self, doc: dict[str, Any]) -> None:
        dict.update(self, doc)

    def _read_only(self, *_args: object, **_kwargs: object) -> NoReturn:
        raise TypeError(f"{type(self).__name__} is read-only")

    __setitem__ = __delitem__ = __ior__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only

    def __reduce__(self) -> tuple[Any, ...]:
        """Copies and pickles remake the answer from its fields (never item by item)."""
        made = fields(self)  # type: ignore[arg-type]  # every subclass is a dataclass
        return (type(self), tuple(getattr(self, f.name) for f in made if f.init))


@dataclass(frozen=True)
class OfferedTool:
    """One tool of an offer, as an edge lists it.

    Attributes:
        name: The tool's name.
        description: What the tool does, for the agent.
        input_schema: The JSON Schema of its arguments (a copy the answer owns).
        output_schema: The JSON Schema of its result, or ``None``.
        read_only: The MCP ``readOnlyHint``.
        destructive: The MCP ``destructiveHint``.
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    read_only: bool
    destructive: bool

    def to_json(self) -> dict[str, Any]:
        """The tool's entry in an offer's JSON.

        Returns:
            ``{name, description, input_schema, output_schema, annotations:
            {readOnlyHint, destructiveHint}}``.
        """
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "output_schema": self.output_schema,
            "annotations": {"readOnlyHint": self.read_only, "destructiveHint": self.destructive},
        }


@dataclass(frozen=True, eq=False, slots=True)
class Offered(Answer):
    """The offer to a token the engine accepted.

    Attributes:
        tools: The tools offered, sorted by name.
        catalog_hash: ``sha256:<hex>`` of the offer's ``chit-catalog/1`` encoding.
        catalog_encoding: ``"chit-catalog/1"``.
        withheld: How many declared tools are not offered.
    """

    ok: ClassVar[Literal[True]] = True
    tools: tuple[OfferedTool, ...] = field(repr=False)
    catalog_hash: str
    catalog_encoding: str
    withheld: int

    def __post_init__(self) -> None:
        self._fill({
            "ok": True,
            "tools": [t.to_json() for t in self.tools],
            "catalog_hash": self.catalog_hash,
            "catalog_encoding": self.catalog_encoding,
            "withheld": self.withheld,
        })


@dataclass(frozen=True, eq=False, slots=True)
class Called(Answer):
    """A tool call that succeeded.

    Attributes:
        result: The tool's structured result (JSON-ready; not in ``repr``, as it
            may hold file content or a sub-token).
    """

    ok: ClassVar[Literal[True]] = True
    result: dict[str, Any] = field(repr=False)

    def __post_init__(self) -> None:
        self._fill({"ok": True, "result": self.result})


@dataclass(frozen=True, eq=False, slots=True)
class Refused(Answer):
    """A refusal: of the token (``offer``), or of the call (``invoke``).

    Attributes:
        code: A stable code (docs/errors.md); an edge treats one it does not
            know as a refusal like any other.
        message: A caller-safe explanation.
        hints: Extra JSON fields for the caller (``offered``, ``retry_after``, ...).
    """

    ok: ClassVar[Literal[False]] = False
    code: str
    message: str
    hints: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._fill({"ok": False, "error": {"error": self.code, "message": self.message,
                                           **self.hints}})

    @classmethod
    def of(cls, exc: ChitError) -> Refused:
        """The refusal of an engine error: its code, message and hints (``exc.to_dict()``)."""
        return cls(exc.code, exc.message, exc.hints)

    @property
    def error(self) -> dict[str, Any]:
        """The refusal's JSON object ``{"error": code, "message": ..., **hints}``."""
        error: dict[str, Any] = dict.__getitem__(self, "error")
        return error


OfferAnswer = Offered | Refused
"""What ``offer`` returns."""

CallAnswer = Called | Refused
"""What ``invoke`` returns."""


def _refusal(doc: dict[str, Any]) -> Refused | None:
    error = doc.get("error")
    if doc.get("ok") is not False or not isinstance(error, dict):
        return None
    code, message = error.get("error"), error.get("message")
    if not isinstance(code, str) or not isinstance(message, str):
        return None
    hints = {k: v for k, v in error.items() if k not in ("error", "message")}
    return Refused(code, message, hints)


def _tool(entry: Any) -> OfferedTool:
    if not isinstance(entry, dict):
        raise AnswerError("an offered tool is not an object")
    name, description = entry.get("name"), entry.get("description")
    inputs, outputs = entry.get("input_schema"), entry.get("output_schema")
    annotations = entry.get("annotations")
    if not (
        isinstance(name, str)
        and isinstance(description, str)
        and isinstance(inputs, dict)
        and (outputs is None or isinstance(outputs, dict))
        and isinstance(annotations, dict)
        and isinstance(annotations.get("readOnlyHint"), bool)
        and isinstance(annotations.get("destructiveHint"), bool)
    ):
        raise AnswerError("an offered tool is not of the API's shape")
    return OfferedTool(
        name, description, inputs, outputs,
        annotations["readOnlyHint"], annotations["destructiveHint"],
    )


def read_offer(doc: object) -> OfferAnswer:
    """Read an answer to ``POST /v1/offer`` from (strictly parsed) wire JSON.

    Fields the API does not define are ignored (docs/engine-api.md, "Versioning").

    Args:
        doc: The parsed body.

    Returns:
        The :class:`Offered` or :class:`Refused` it holds.

    Raises:
        AnswerError: If ``doc`` is not a refusal (``ok`` false, an ``error``
            object with string ``error`` and ``message``) nor an offer (``ok``
            true, a ``tools`` list of well-formed tools, string ``catalog_hash``
            and ``catalog_encoding``, integer ``withheld``).
    """
    if not isinstance(doc, dict):
        raise AnswerError("the answer is not an object")
    refused = _refusal(doc)
    if refused is not None:
        return refused
    tools, catalog_hash = doc.get("tools"), doc.get("catalog_hash")
    encoding, withheld = doc.get("catalog_encoding"), doc.get("withheld")
    if (
        doc.get("ok") is not True
        or not isinstance(tools, list)
        or not isinstance(catalog_hash, str)
        or not isinstance(encoding, str)
        or not isinstance(withheld, int)
        or isinstance(withheld, bool)
    ):
        raise AnswerError("the answer is not an offer")
    return Offered(tuple(_tool(t) for t in tools), catalog_hash, encoding, withheld)


def read_call(doc: object) -> CallAnswer:
    """Read an answer to ``POST /v1/invoke`` from (strictly parsed) wire JSON.

    Args:
        doc: The parsed body.

    Returns:
        The :class:`Called` or :class:`Refused` it holds.

    Raises:
        AnswerError: If ``doc`` is not a refusal (as for :func:`read_offer`) nor
            ``{"ok": true, "result": {...}}``.
    """
    if not isinstance(doc, dict):
        raise AnswerError("the answer is not an object")
    refused = _refusal(doc)
    if refused is not None:
        return refused
    result = doc.get("result")
    if doc.get("ok") is not True or not isinstance(result, dict):
        raise AnswerError("the answer is not a call's result")
    return Called(result)


def read_refusal(doc: object) -> Refused:
    """Read a refusal (``{"ok": false, "error": {...}}``) from wire JSON.

    Raises:
        AnswerError: If ``doc`` is not one.
    """
    refused = _refusal(doc) if isinstance(doc, dict) else None
    if refused is None:
        raise AnswerError("the answer is not a refusal")
    return refused


def warning_of(line: object) -> str | None:
    """A vital-sign warning line fit to show an agent, or ``None``.

    The line goes into the MCP instructions (docs/vital-signs.md): it must be
    one line of printable text, at most ``LIMITS.warning_line_chars``
    characters; anything else is not shown.

    Args:
        line: The candidate (untrusted, any type).

    Returns:
        ``line``, or ``None`` if it is not such a line.
    """
    if not isinstance(line, str) or not line or len(line) > LIMITS.warning_line_chars:
        return None
    return line if line.isprintable() else None


def read_warning(doc: object) -> str | None:
    """Read an answer to ``POST /v1/warning`` from (strictly parsed) wire JSON.

    Args:
        doc: The parsed body (untrusted).

    Returns:
        The line (:func:`warning_of`), or ``None``: no mismatch, a refusal, or
        anything off the API (a vital sign is silent when it cannot be read).
    """
    if not isinstance(doc, dict) or doc.get("ok") is not True:
        return None
    return warning_of(doc.get("warning"))
