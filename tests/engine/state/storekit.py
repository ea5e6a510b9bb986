"""Helpers of the store contract suite: raw statements behind a store's back, racing processes."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg

from engine.state import Store

ROOT = Path(__file__).resolve().parents[3]

MakeStore = Callable[..., Store]


def raw(url: str, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Run one statement on the store's database behind its back (``?`` placeholders)."""
    if url.startswith("sqlite://"):
        with sqlite3.connect(url[len("sqlite://"):]) as db:
            return db.execute(statement, tuple(params)).fetchall()
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(statement.replace("?", "%s"), tuple(params))
        return cursor.fetchall() if cursor.description else []


def race(tmp_path: Path, tasks: Sequence[Sequence[str]], *, timeout: float = 120,
         then: Callable[[], None] | None = None) -> list[dict[str, Any]]:
    """Run ``python -m tests.engine.state.racer GO TASK...`` once per task, started together.

    Each racer opens its own store, says it is ready, and waits for the go file;
    then all run at once (and ``then()`` runs here). Returns each racer's JSON
    answer, in task order.
    """
    go = tmp_path / f"go-{time.monotonic_ns()}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    racers = [
        subprocess.Popen([sys.executable, "-m", "tests.engine.state.racer", str(go), *task],
                         cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
        for task in tasks
    ]
    try:
        deadline = time.monotonic() + timeout
        while len(list(tmp_path.glob(go.name + ".*"))) < len(tasks):
            assert time.monotonic() < deadline, "the racers did not get ready"
            assert all(r.poll() is None for r in racers), [r.communicate() for r in racers]
            time.sleep(0.01)
        go.write_text("go")
        if then is not None:
            then()
        outputs = [r.communicate(timeout=timeout) for r in racers]
    finally:
        for racer in racers:
            if racer.poll() is None:
                racer.kill()
                racer.wait()
    assert all(r.returncode == 0 for r in racers), outputs
    return [json.loads(out) for out, _err in outputs]
