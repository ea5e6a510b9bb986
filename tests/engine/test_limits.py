"""engine/limits.py: one frozen record of every bound, documented in docs/limits.md."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from engine.limits import LIMITS, Limits

ROOT = Path(__file__).resolve().parent.parent.parent
ROW = re.compile(r"^\| `([a-z0-9_]+)` \| `([^`]+)` \|", flags=re.MULTILINE)


def _documented() -> dict[str, object]:
    text = (ROOT / "docs" / "limits.md").read_text(encoding="utf-8")
    rows = ROW.findall(text)
    names = [name for name, _ in rows]
    assert len(names) == len(set(names)), "a field is listed twice"
    return {name: ast.literal_eval(default) for name, default in rows}


def test_the_table_lists_every_field_with_its_default() -> None:
    documented = _documented()
    fields = {f.name: f.default for f in dataclasses.fields(Limits)}
    assert list(documented) == list(fields)  # same fields, in the dataclass's order
    for name, default in fields.items():
        assert documented[name] == default, name
        assert type(documented[name]) is type(default), name


def test_every_field_has_a_one_line_docstring() -> None:
    tree = ast.parse((ROOT / "engine" / "limits.py").read_text(encoding="utf-8"))
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Limits"]
    body = cls.body
    for at, node in enumerate(body):
        if isinstance(node, ast.AnnAssign):
            assert isinstance(node.target, ast.Name)
            doc = body[at + 1] if at + 1 < len(body) else None
            assert isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant), node.target.id
            assert isinstance(doc.value.value, str) and "\n" not in doc.value.value, node.target.id


def test_limits_are_frozen() -> None:
    """Threat: one module widening a bound for every other module at run time."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        LIMITS.token_chars = 1 << 30  # type: ignore[misc]
    with pytest.raises((AttributeError, TypeError)):
        LIMITS.not_a_limit = 1  # type: ignore[attr-defined]
    assert LIMITS == Limits()


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "8", None])
def test_a_limit_is_a_positive_number_of_its_type(value: object) -> None:
    with pytest.raises(ValueError, match="token_chars"):
        dataclasses.replace(LIMITS, token_chars=value)  # type: ignore[arg-type]
    assert dataclasses.replace(LIMITS, token_chars=1).token_chars == 1
    slower = dataclasses.replace(LIMITS, store_retry_pause_seconds=0.5)
    assert slower.store_retry_pause_seconds == 0.5


def test_the_policy_keeps_the_engine_commit_message_bound() -> None:
    """policy/ imports nothing of the engine, so it keeps a copy; it must not drift."""
    from policy.model import MAX_MESSAGE_CHARS

    assert MAX_MESSAGE_CHARS == LIMITS.message_chars
