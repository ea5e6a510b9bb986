"""Per-language fixtures for the tree-sitter extraction (engine/semantic/extract.py).

Each fixture is a small file in one language with definitions, a doc comment,
calls, an import and a parent type; the assertions name what the index must find.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.admin import operator
from engine.admin.seed import create_repository
from engine.semantic.extract import extract
from engine.semantic.fileindex import FileIndex
from engine.semantic.languages import language_for
from engine.semantic.records import Role, scip_symbol
from engine.service import Engine

FIXTURES: dict[str, bytes] = {
    "py/shapes.py": b'''import math
from .base import Shape as BaseShape

# A circle.
class Circle(BaseShape):
    """Round."""

    def area(self):
        return math.pi * square(self.r)


def square(x):
    return x * x
''',
    "js/shapes.js": b'''import { Shape } from "./base.js";

/** A circle. */
export class Circle extends Shape {
  area() { return Math.PI * square(this.r); }
}

function square(x) { return x * x; }
''',
    "ts/shapes.ts": b'''import { Shape } from "./base";

// An area.
export interface HasArea extends Shape { area(): number }

/** A circle. */
export class Circle extends Shape implements HasArea {
  area(): number { return Math.PI * square(this.r); }
}

function square(x: number): number { return x * x; }
''',
    "go/shapes.go": b'''package shapes

import "math"

// Circle is round.
type Circle struct {
\tShape
\tr float64
}

// Area of the circle.
func (c *Circle) Area() float64 { return math.Pi * square(c.r) }

func square(x float64) float64 { return x * x }
''',
    "rs/shapes.rs": b'''use std::f64::consts::PI;

/// A circle.
#[derive(Debug)]
pub struct Circle { r: f64 }

impl Shape for Circle {
    fn area(&self) -> f64 { PI * square(self.r) }
}

fn square(x: f64) -> f64 { x * x }
''',
    "java/Circle.java": b'''package shapes;

import java.util.List;

/** A circle. */
public class Circle extends Shape {
    public double area() { return Math.PI * square(r); }

    static double square(double x) { return x * x; }
}
''',
}
AREA = {"py": "area", "js": "area", "ts": "area", "go": "Area", "rs": "area", "java": "area"}


def _index(path: str) -> FileIndex:
    language = language_for(path)
    assert language is not None
    return extract(path, "0" * 40, FIXTURES[path], language)


@pytest.mark.parametrize("path", sorted(FIXTURES))
def test_definitions_docs_calls_imports_and_bases(path: str) -> None:
    record = _index(path)
    assert not record.truncated
    defs = {d.qualname: d for d in record.definitions}
    circle = defs["Circle"]
    assert circle.kind in ("class", "struct")
    assert (circle.doc is not None and "ircle" in circle.doc) or circle.doc == "Round."
    # Parent class: named as written (Rust: through `impl Shape for Circle`).
    if path.endswith(".rs"):
        assert ("Circle", "Shape", 6) in record.impls  # zero-based line
    else:
        assert circle.bases[:1] in (("Shape",), ("BaseShape",))
    method = defs[f"Circle.{AREA[path.split('/')[0]]}"]
    assert method.kind == "method" and method.scope == "Circle"
    assert method.signature and "{" not in method.signature
    square = defs.get("square") or defs["Circle.square"]  # Java: a static method
    assert square.kind in ("function", "method")
    # The call to square sits inside the method.
    calls = [o for o in record.occurrences if o.roles & Role.CALL and o.name == "square"]
    assert [o.enclosing for o in calls] == [method.qualname]
    assert calls[0].range.start_line == method.range.start_line or path.endswith(".py")
    # One import, with the module as written.
    assert record.imports and record.imports[0].module in (
        "math", ".base", "./base.js", "./base", "std::f64::consts", "java.util")


def test_definition_lines_are_zero_based_like_scip() -> None:
    record = _index("py/shapes.py")
    circle = next(d for d in record.definitions if d.name == "Circle")
    assert circle.range.start_line == 4 and circle.name_range.start_col == 6
    assert circle.symbol == scip_symbol("py/shapes.py", "Circle", ("class",))
    assert circle.symbol == "chit . . . py/`shapes.py`/Circle#"
    area = next(d for d in record.definitions if d.name == "area")
    assert area.symbol.endswith("Circle#area().")


def test_oversized_and_unknown_files_are_not_indexed() -> None:
    assert language_for("README.md") is None and language_for("Makefile") is None
    big = extract("a.py", "0", b"x = 1\n" * 200_000, "python")
    assert big.truncated and big.definitions == ()


def test_every_language_through_the_engine(tmp_path: Path) -> None:
    home, repo = tmp_path / "home", tmp_path / "repo"
    create_repository(repo, FIXTURES)
    operator.init_home(home)
    engine = Engine(home, repo)
    token = str(operator.mint_token(home, agent="a", operations=["read"], paths=["**"],
                                    ttl_seconds=600)["token"])
    listed = engine.offer(token)["catalog_hash"]
    answer = engine.invoke(token, "search_symbols", {"query": "Circle", "limit": 50},
                           session="s", offered_catalog_hash=listed)
    assert answer["ok"], answer
    paths = {s["path"] for s in answer["result"]["symbols"] if s["symbol"] == "Circle"}
    assert paths == set(FIXTURES)
    # Go and Rust scope methods by their receiver or impl type. Each file defines
    # its own top-level square: its calls are its own, not the other files'
    # (and a use never refers to a definition in another language).
    for path, caller in [("go/shapes.go", "Circle.Area"), ("rs/shapes.rs", "Circle.area"),
                         ("py/shapes.py", "Circle.area")]:
        answer = engine.invoke(token, "symbol_relations",
                               {"symbol": "square", "path": path, "kinds": ["callers"]},
                               session="s", offered_catalog_hash=listed)
        callers = {(r["symbol"]["symbol"], r["symbol"]["path"])
                   for r in answer["result"]["relations"]}
        assert (caller, path) in callers
        assert {p for _s, p in callers} == {path}  # never another language's square
