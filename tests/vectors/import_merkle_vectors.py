"""Regenerate tests/vectors/merkle_rfc6962.json from a clone of transparency-dev/merkle.

Run from the repository root, with a clone (or bare mirror) of
https://github.com/transparency-dev/merkle at the pinned commit:
``python tests/vectors/import_merkle_vectors.py PATH/TO/merkle``.

Only published test data is taken, never code: the reference tree's eight leaf
inputs, its root for every size and its compact ranges (frontiers) from
``testonly/constants.go``, and every inclusion and consistency probe under
``testdata/inclusion`` and ``testdata/consistency`` (JSON, base64 hashes).
Subtree probes (``testdata/subtree*``) are for proofs chit does not make.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

COMMIT = "417fb0c314750d94e53942e9f92e79b6d35915db"
OUT = Path(__file__).resolve().parent / "merkle_rfc6962.json"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def function_body(source: str, name: str) -> str:
    match = re.search(rf"func {name}\(\)[^{{]*\{{\n(.*?)\n\}}\n", source, re.S)
    if match is None:
        raise SystemExit(f"constants.go has no function {name}")
    return match.group(1)


def hexes(text: str) -> list[str]:
    return re.findall(r'hd\("([0-9a-f]*)"\)', text)


def constants(source: str) -> dict[str, Any]:
    levels = [hexes(level) for level in function_body(source, "NodeHashes").split("}, {")]
    frontiers = []
    for tree in function_body(source, "CompactTrees").splitlines()[2:]:
        tree = tree.strip()
        if tree.startswith("nil"):
            frontiers.append([])
        elif tree.startswith("{"):
            refs = re.findall(r"nh\[(\d+)\]\[(\d+)\]", tree)
            frontiers.append([levels[int(a)][int(b)] for a, b in refs])
    roots = hexes(function_body(source, "RootHashes"))
    empty = hexes(function_body(source, "EmptyRootHash"))
    return {
        "leaf_inputs_hex": hexes(function_body(source, "LeafInputs")),
        "roots_hex": empty + roots,  # RootHashes() starts with EmptyRootHash()
        "frontiers_hex": frontiers,
    }


def probes(repo: Path, folder: str) -> list[dict[str, Any]]:
    names = git(repo, "ls-tree", "-r", "--name-only", COMMIT, folder).split()
    found = []
    for name in sorted(names):
        probe = json.loads(git(repo, "show", f"{COMMIT}:{name}"))
        found.append({"file": name, **probe})
    return found


def main() -> None:
    repo = Path(sys.argv[1])
    source = git(repo, "show", f"{COMMIT}:testonly/constants.go")
    vectors = {
        "source": {
            "repository": "https://github.com/transparency-dev/merkle",
            "commit": COMMIT,
            "files": ["testonly/constants.go", "testdata/inclusion/", "testdata/consistency/"],
            "note": "roots_hex is indexed by tree size (0 to 8); frontiers_hex by tree size "
            "(CompactTrees); probes keep their file and fields (base64 hashes, null = no proof)",
        },
        **constants(source),
        "inclusion": probes(repo, "testdata/inclusion"),
        "consistency": probes(repo, "testdata/consistency"),
    }
    OUT.write_text(json.dumps(vectors, indent=1) + "\n", encoding="utf-8")
    print(
        f"wrote {OUT}: {len(vectors['inclusion'])} inclusion, "
        f"{len(vectors['consistency'])} consistency probes"
    )


if __name__ == "__main__":
    main()
