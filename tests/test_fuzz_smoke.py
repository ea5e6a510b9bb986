"""The fuzz harnesses (fuzz/README.md) for a short, fixed budget.

Threat: a parser of untrusted bytes (token text and ``chit-det/1``, paths and
globs, the policy, the engine API's JSON, the exchange's JWTs) that raises
something other than chit's own refusal, hangs or grows without bound. Each
harness runs as libFuzzer runs it (a subprocess with atheris), from its seed
corpus and the inputs fuzzing has found before (fuzz/regressions/), for a fixed
number of runs with a fixed seed; any crash, timeout or memory limit fails.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

FUZZ = Path(__file__).resolve().parents[1] / "fuzz"
TARGETS = ["cbor", "token", "paths", "policy", "engine_api", "jwt"]
RUNS = 3000


def test_every_harness_is_listed() -> None:
    assert sorted(p.stem.removeprefix("fuzz_") for p in FUZZ.glob("fuzz_*.py")) == sorted(TARGETS)


@pytest.mark.parametrize("target", TARGETS)
def test_harness_runs_clean(target: str, tmp_path: Path) -> None:
    found = tmp_path / "found"
    found.mkdir()
    dirs = [found, FUZZ / "corpus" / target]
    if (FUZZ / "regressions" / target).is_dir():
        dirs.append(FUZZ / "regressions" / target)
    options = [f"-dict={FUZZ / 'corpus' / 'engine_api.dict'}"] if target == "engine_api" else []
    done = subprocess.run(
        [
            sys.executable, str(FUZZ / f"fuzz_{target}.py"), *map(str, dirs),
            f"-runs={RUNS}", "-seed=1", "-rss_limit_mb=2048", "-timeout=60",
            f"-artifact_prefix={tmp_path}/", *options,
        ],
        capture_output=True, text=True, timeout=600, check=False,
    )
    tail = done.stderr[-4000:]
    assert done.returncode == 0, tail
    assert f"Done {RUNS} runs" in done.stderr, tail
    assert not list(tmp_path.glob("crash-*")) and not list(tmp_path.glob("timeout-*")), tail


def test_seed_corpus_is_what_make_corpus_writes(tmp_path: Path) -> None:
    # The seeds come from the published vectors and docs: regenerate them when those change.
    subprocess.run([sys.executable, str(FUZZ / "make_corpus.py"), str(tmp_path)], check=True)
    for target in TARGETS:
        want = {p.name: p.read_bytes() for p in (tmp_path / target).iterdir()}
        have = {p.name: p.read_bytes() for p in (FUZZ / "corpus" / target).iterdir()}
        assert have == want, f"fuzz/corpus/{target} is stale: run python fuzz/make_corpus.py"
    dictionary = (FUZZ / "corpus" / "engine_api.dict").read_text()
    assert dictionary == (tmp_path / "engine_api.dict").read_text()
