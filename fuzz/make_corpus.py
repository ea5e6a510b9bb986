"""Write the seed corpora under fuzz/corpus/<target>/ from the published vectors.

Run from anywhere: ``python fuzz/make_corpus.py``. Deterministic; the seeds are
checked in, so run it again only when the vectors or the docs' examples change.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
VECTORS = ROOT / "tests" / "vectors"
CORPUS = Path(__file__).resolve().parent / "corpus"


def _write(target: str, seeds: list[bytes], corpus: Path = CORPUS) -> None:
    folder = corpus / target
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for seed in dict.fromkeys(seeds):
        (folder / hashlib.sha256(seed).hexdigest()[:16]).write_bytes(seed)


def _tokens() -> list[str]:
    cases = json.loads((VECTORS / "tokens.json").read_text())["cases"]
    return [c["token"] for c in cases if isinstance(c.get("token"), str)]


def _envelope(text: str) -> bytes | None:
    body = text.strip().removeprefix("chit_")
    try:
        return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except ValueError:
        return None


def cbor_seeds() -> list[bytes]:
    doc = json.loads((VECTORS / "cbor_det1.json").read_text())
    seeds = [bytes.fromhex(c["hex"]) for c in doc["valid"] + doc["invalid"]]
    seeds += [e for e in map(_envelope, _tokens()) if e is not None]
    return seeds


def token_seeds() -> list[bytes]:
    seeds: list[bytes] = []
    for text in _tokens():
        seeds.append(b"\x00" + text.encode())
        envelope = _envelope(text)
        if envelope is not None:
            seeds += [b"\x01" + envelope, b"\x02" + envelope]
    return seeds


DOCS = ROOT / "docs"


def _fenced(text: str, language: str) -> list[str]:
    """The bodies of the ```language fenced blocks of a Markdown text."""
    blocks, inside, lines = [], False, []
    for line in text.splitlines():
        if not inside and line.strip() == f"```{language}":
            inside, lines = True, []
        elif inside and line.strip() == "```":
            inside = False
            blocks.append("\n".join(lines) + "\n")
        elif inside:
            lines.append(line)
    return blocks


def _policies() -> list[str]:
    import policy
    from tests import jwt_issuer

    texts = [policy.DEFAULT_POLICY_TOML, jwt_issuer.POLICY]
    texts += [p.read_text() for p in sorted((DOCS / "examples").glob("*.toml"))]
    for doc in sorted(DOCS.glob("*.md")):
        texts += _fenced(doc.read_text(), "toml")
    return texts


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def policy_seeds() -> list[bytes]:
    return [text.encode() for text in _policies()]


PATHS = [
    "src/a.py", "src/api/v1/x.py", "docs/README.md", ".env", "src/.env", "a/b/c/d/e",
    "CON", "nul.txt", "src/aux.c", "dir./x", "x ", "a::$DATA", ".git/config", ".GIT",
    "git~1/x", "src/../x", "/abs", "a//b", "\u00e9t\u00e9/\u0065\u0301", "src/\u200d.git",
]


def paths_seeds() -> list[bytes]:
    import tomllib

    globs: list[str] = ["**", "src/**", "src/*.py", "a/**/b", "*", "?", "src/api/**"]
    for text in _policies():
        try:
            globs += [s for s in _strings(tomllib.loads(text)) if "/" in s or "*" in s]
        except tomllib.TOMLDecodeError:
            continue
    globs = list(dict.fromkeys(g for g in globs if "\n" not in g))[:60]
    seeds = []
    for i, glob in enumerate(globs):
        outer = globs[(i * 7 + 3) % len(globs)]
        path = PATHS[i % len(PATHS)]
        seeds += [f"{glob}\n{outer}\n{path}".encode(), f"{glob}\n**\n{path}".encode()]
    seeds += [f"**\n**\n{p}".encode() for p in PATHS]
    return seeds


def engine_api_seeds() -> list[bytes]:
    from engine.catalog.declarations import TOOLS

    seeds = []
    for name in ("engine-api.md", "tools.md", "approvals.md"):
        seeds += [b.encode() for b in _fenced((DOCS / name).read_text(), "json")]
    examples = [
        {}, {"path": "src/a.py"}, {"path": "src/a.py", "start_line": 2, "end_line": 9},
        {"query": "def (\\w+)", "regex": True, "paths": ["src/**"], "limit": 5},
        {"path": "src", "glob": "*.py", "limit": 10}, {"message": "Fix it"},
        {"path": "a.txt", "content": "x"}, {"ref": "main", "path": "src"},
    ]
    for i, tool in enumerate(TOOLS):
        body = {
            "token": "chit_AAAA", "tool": tool.name, "session": "s-1",
            "arguments": examples[i % len(examples)], "offered_catalog_hash": None,
        }
        seeds.append(json.dumps(body).encode())
    seeds += [
        b'{"token": "chit_AAAA", "repo": "app"}', b'{"after": -1, "timeout": 0.5}',
        b'{"after": 9223372036854775807, "timeout": 30}',
        b'{"token": "t", "tool": "read_file", "session": "s", "approval": '
        b'"apr_abcdefghijklmnopqrstuvwxyz"}',
    ]
    return seeds


def jwt_seeds() -> list[bytes]:
    from tests import jwt_issuer

    seeds = []
    for iss in (jwt_issuer.ISS_ED, jwt_issuer.ISS_LAX, jwt_issuer.ISS_RSA):
        claims = {
            "iss": iss, "aud": jwt_issuer.AUD, "iat": 1700000000, "exp": 4102444800,
            "sub": "repo:acme/app", "repository": "acme/app", "repository_owner": "Acme",
            "ref": "refs/heads/main", "jti": "0f6c3c1e-8d7a-4a57-9d5e-5b1f0c8e2a11",
        }
        mode = b"\x02" if iss == jwt_issuer.ISS_RSA else b"\x01"
        seeds.append(mode + json.dumps(claims).encode())
        seeds.append(mode + json.dumps({**claims, "nbf": 1700000000, "aud": [claims["aud"]]})
                     .encode())
        # The text form, with a signature no key made: the refusals before and at it.
        alg = {"alg": "EdDSA" if mode == b"\x01" else "RS256", "typ": "JWT"}
        parts = [json.dumps(alg).encode(), json.dumps(claims).encode(), b"not a signature"]
        seeds.append(b"\x00" + b".".join(base64.urlsafe_b64encode(p).rstrip(b"=") for p in parts))
    return seeds


def engine_api_dict() -> str:
    """A libFuzzer dictionary for the engine API: JSON, the API's fields, the tools."""
    from engine.catalog.declarations import TOOLS

    words = [
        '"token"', '"tool"', '"arguments"', '"session"', '"offered_catalog_hash"', '"repo"',
        '"approval"', '"after"', '"timeout"', "null", "true", "false", "{", "}", "[", "]",
        ":", ",", '"apr_', '"chit_', "-1", "1e400", "\\uD800",
    ]
    words += [f'"{tool.name}"' for tool in TOOLS]
    fields = {name for tool in TOOLS for name in tool.input_model.model_fields}
    words += [f'"{name}"' for name in sorted(fields)]
    quoted = ('"' + w.replace("\\", "\\\\").replace('"', '\\"') + '"' for w in words)
    return "".join(f"{line}\n" for line in dict.fromkeys(quoted))


def write_all(corpus: Path = CORPUS) -> None:
    """Write every target's seeds under ``corpus`` (default: fuzz/corpus) and the dictionary."""
    for target, seeds in SEEDS.items():
        _write(target, seeds(), corpus)
    (corpus / "engine_api.dict").write_text(engine_api_dict())


SEEDS = {
    "cbor": cbor_seeds,
    "token": token_seeds,
    "paths": paths_seeds,
    "policy": policy_seeds,
    "engine_api": engine_api_seeds,
    "jwt": jwt_seeds,
}

if __name__ == "__main__":
    write_all(Path(sys.argv[1]) if len(sys.argv) > 1 else CORPUS)
