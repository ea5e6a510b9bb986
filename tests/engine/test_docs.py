"""Docs that derive from code stay in step with it."""

from __future__ import annotations

import re
from pathlib import Path

from engine.errors import CODES
from engine.tools.offer import markdown_table

DOCS = Path(__file__).resolve().parent.parent.parent / "docs"


def test_tools_table_matches_the_declarations() -> None:
    text = (DOCS / "tools.md").read_text()
    table = text.split("<!-- table:begin -->\n", 1)[1].split("<!-- table:end -->", 1)[0]
    assert table == markdown_table()


def test_every_error_code_is_documented() -> None:
    text = (DOCS / "errors.md").read_text()
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", text, flags=re.MULTILINE))
    assert documented == set(CODES)


def test_policy_doc_shows_the_default_policy_verbatim() -> None:
    from policy import DEFAULT_POLICY_TOML

    assert DEFAULT_POLICY_TOML in (DOCS / "policy.md").read_text()
