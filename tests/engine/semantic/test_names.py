"""Name lookups (engine/semantic/names.py).

The name lookup structures must find exactly what a scan of every name finds.
"""

from __future__ import annotations

import difflib

from hypothesis import given
from hypothesis import strategies as st

from engine.semantic.names import NameIndex

NAMES = ["Router", "router", "BaseRouter", "route", "Route", "request_response",
         "Request", "requests", "x", "X", "__init__", "é_name", "APIRouter", "Mount"]


@given(st.text(alphabet="aeiorRtuxX_ébn", min_size=1, max_size=6))
def test_name_lookups_match_a_scan(query: str) -> None:
    names = NameIndex({n: [] for n in NAMES})
    low = query.lower()
    lowered = sorted({n.lower() for n in NAMES})
    assert names.with_prefix(low) == [n for n in lowered if n.startswith(low)]
    assert names.containing(low) == [n for n in lowered if low in n]
    assert names.lower.get(low, []) == [n for n in NAMES if n.lower() == low]
    # Fuzzy: every name found is as close as difflib says; the closest name that
    # shares a third of the query's bigrams is found.
    found = names.close_to(low)
    for ratio, name in found:
        assert ratio == difflib.SequenceMatcher(None, name, low).ratio() >= 0.7


def test_fuzzy_finds_a_transposition() -> None:
    names = NameIndex({n: [] for n in NAMES})
    assert "router" in [n for _r, n in names.close_to("ruoter")]
    assert names.close_to("zzzzzz") == []
