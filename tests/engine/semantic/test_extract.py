"""The extractor's bounds and order (engine/semantic/extract.py).

Whatever a committed file holds, its records must encode into bytes the codec
accepts (a cold index decodes what its workers send), and the extraction must
not fail on deep or odd syntax; occurrences come in source order.
"""

from __future__ import annotations

import textwrap

from engine.limits import LIMITS
from engine.semantic.codec import decode, encode, encode_extracted
from engine.semantic.extract import extract, extract_packed
from engine.semantic.fileindex import FileIndex
from engine.semantic.records import Role

BLOB = "0" * 40


def _both_ways(path: str, data: bytes, language: str) -> FileIndex:
    """The records of a file, checked to decode alike from both encoders."""
    record = extract(path, BLOB, data, language)
    packed = encode_extracted(extract_packed(path, data, language))
    assert packed == encode(record)
    assert decode(packed, path, BLOB, language) == record
    return record


def test_names_past_the_codec_bound_are_left_out_and_the_record_decodes() -> None:
    long = "n" * (LIMITS.name_chars + 1)
    bases = ", ".join(f"B{i}" for i in range(LIMITS.bases_per_definition + 10))
    source = (
        f"import {long}\n"
        f"class {long}:\n"
        "    field = 1\n"
        "    def method(self):\n"
        "        import os\n"
        "        return helper()\n"
        f"class Many({bases}):\n"
        "    pass\n"
        f"{long}()\n"
        "def helper():\n"
        "    return 1\n"
    ).encode()
    record = _both_ways("m.py", source, "python")
    assert record.truncated
    assert {d.qualname for d in record.definitions} == {"Many", "helper"}
    many = next(d for d in record.definitions if d.name == "Many")
    assert len(many.bases) == LIMITS.bases_per_definition and many.bases[0] == "B0"
    assert long not in record.names and "helper" in record.names
    # What sits in the unrecordable class is enclosed by the file, not by its name.
    assert [(i.module, i.enclosing) for i in record.imports] == [("os", None)]
    call = next(o for o in record.occurrences if o.name == "helper" and o.roles & Role.CALL)
    assert call.enclosing is None


def test_a_deeply_nested_heritage_clause_does_not_exhaust_the_stack() -> None:
    depth = 3_000
    source = b"class A(" + b"f(" * depth + b"Base" + b")" * depth + b"):\n    pass\n"
    record = _both_ways("m.py", source, "python")
    (cls,) = (d for d in record.definitions if d.name == "A")
    # Each call's callee names a base, as written: the first LIMITS.bases_per_definition of them.
    assert cls.bases == ("f",) * LIMITS.bases_per_definition and record.truncated


def test_deep_syntax_is_indexed_to_the_bottom() -> None:
    depth = 500
    source = b"x = " + b"[" * depth + b"deep_name" + b"]" * depth + b"\n"
    record = _both_ways("m.py", source, "python")
    assert "deep_name" in record.names and not record.truncated


def test_occurrences_are_in_source_order_and_a_callee_is_one_call() -> None:
    source = b"def f():\n    a.b(c)\n    g()(d)\n"
    record = _both_ways("m.py", source, "python")
    got = [(o.name, bool(o.roles & Role.CALL), o.enclosing) for o in record.occurrences]
    assert got == [
        ("a", False, "f"),
        ("b", True, "f"),
        ("c", False, "f"),
        ("g", True, "f"),  # called once, though `g()(d)` holds two calls naming it
        ("d", False, "f"),
    ]
    starts = [(o.range.start_line, o.range.start_col) for o in record.occurrences]
    assert starts == sorted(starts)


def test_tokens_inserted_by_error_recovery_are_not_occurrences() -> None:
    # tree-sitter-go repairs `[]` here with a zero-width (MISSING) type name.
    source = b"package p\ntype _ myInt /* note */ []\n"
    record = _both_ways("p.go", source, "go")
    assert "myInt" in record.names and "" not in record.names
    assert all(o.range.end_col > o.range.start_col for o in record.occurrences)


def test_identifiers_inside_imports_and_definition_names_are_no_references() -> None:
    source = b"from pkg import thing as alias\ndef thing():\n    return alias\n"
    record = _both_ways("m.py", source, "python")
    assert [o.name for o in record.occurrences] == ["alias"]
    assert record.occurrences[0].range.start_line == 2


def test_a_callee_of_a_node_type_no_identifier_has_is_still_a_call() -> None:
    # `({a})()` calls the shorthand property `a`, a name no JavaScript reference spells.
    source = b"function f() { ({a})(); b(); }\n"
    record = _both_ways("m.js", source, "javascript")
    got = [(o.name, bool(o.roles & Role.CALL), o.enclosing) for o in record.occurrences]
    assert got == [("a", True, "f"), ("b", True, "f")]


def test_docstrings_are_cleaned_as_by_two_dedents() -> None:
    # _clean_doc skips the first of the two dedents when it cannot change the result.
    from engine.semantic.rules.base import clean_doc as _clean_doc

    def reference(raw: str) -> str | None:
        doc = textwrap.dedent(raw).strip()
        if not doc:
            return None
        lines = doc.splitlines()
        return (lines[0].strip() + "\n" + textwrap.dedent("\n".join(lines[1:]))).strip()

    samples = [
        "Summary.\n\n    Details\n      more\n    ",
        "\n    Summary.\n\n    Details\n",
        "Summary.\r\n    Windows\r\n    lines\r\n",
        "  Indented\n  first\r  split by splitlines, not by dedent\n  end",
        "Sum\rmary\n  \x0c  form feed\n\t tab\n \t\n    end",
        "\r   ",
        " \t ",
        "One line",
        "Tabs\n\tone\n\t\ttwo\n  \tmixed",
        "",
    ]
    for raw in samples:
        assert _clean_doc(raw) == reference(raw), raw
