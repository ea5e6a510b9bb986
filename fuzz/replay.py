"""Run a harness's ``TestOneInput`` over files, outside libFuzzer.

``python fuzz/replay.py TARGET PATH...`` (each PATH a file or a folder of them):
reproduces a crash with a plain traceback, and under coverage.py measures what
a corpus reaches (fuzz/README.md, "Coverage").
"""

from __future__ import annotations

import importlib
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: replay.py TARGET PATH...", file=sys.stderr)
        return 2
    harness = importlib.import_module(f"fuzz_{argv[0]}")
    files = []
    for arg in map(Path, argv[1:]):
        files += sorted(p for p in arg.iterdir() if p.is_file()) if arg.is_dir() else [arg]
    failed = 0
    for path in files:
        try:
            harness.TestOneInput(path.read_bytes())
        except Exception:
            failed += 1
            print(f"{path}:", file=sys.stderr)
            traceback.print_exc()
    print(f"replayed {len(files)} inputs, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
