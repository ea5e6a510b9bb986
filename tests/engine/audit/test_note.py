"""engine/audit/note.py against published signed notes, verifier keys and checkpoints.

Vectors (tests/vectors/signed_note.json, each with where it was published):
Go's golang.org/x/mod sumdb/note tests (the PeterNeumann and EnochRoot keys and
notes) and sumdb/tlog tree text; the examples of the C2SP signed-note and
tlog-checkpoint specs; a sum.golang.org checkpoint under the Go checksum
database's real key; and sigsum-go's checkpoint signed with a published seed.
Keys are real Ed25519 keys of ``cryptography``; nothing is mocked.

Threat: a forged or altered checkpoint accepted as the log's, a note read as
signed by a key that did not sign it, or a parser that reads one note two
ways, would let a rewritten call log pass an auditor or a witness.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from dataclasses import FrozenInstanceError
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given
from hypothesis import strategies as st

from engine.audit import merkle, note
from engine.audit.note import NoteError

V = json.loads(
    (Path(__file__).resolve().parents[2] / "vectors" / "signed_note.json").read_text("utf-8")
)
GO = V["go_sumdb_note"]
C2SP = V["c2sp_signed_note"]
SUMDB = V["sum_golang_org"]
SIGSUM = V["sigsum_checkpoint"]
DASH = "\u2014"
PETER_SIG, ENOCH_SIG = GO["peter_signature_line"], GO["enoch_signature_line"]
TEXT = GO["text"]


def peter_key() -> Ed25519PrivateKey:
    """The private key of Go's ``PRIVATE+KEY+PeterNeumann+...`` signer key (type byte, seed)."""
    raw = base64.b64decode(GO["signer_key"].split("+", 4)[4])
    assert raw[0] == 1 and len(raw) == 33
    return Ed25519PrivateKey.from_private_bytes(raw[1:])


PETER = note.parse_verifier_key(GO["verifier_key"])
ENOCH = note.parse_verifier_key(GO["other_verifier_key"])
# Everything secret-looking a message must never repeat.
MATERIAL = [
    GO["verifier_key"].split("+", 1)[1],
    GO["other_verifier_key"].split("+", 1)[1],
    PETER_SIG.split()[2],
    ENOCH_SIG.split()[2],
    PETER.public.hex(),
    base64.b64encode(PETER.public).decode(),
]


def refused(call: Callable[[], Any], match: str | None = None) -> str:
    """Assert ``call`` raises NoteError matching ``match`` with no key material in it."""
    with pytest.raises(NoteError, match=match) as caught:
        call()
    message = str(caught.value)
    assert not any(m in message for m in MATERIAL), message
    return message


# --- key names, key hashes and verifier keys ------------------------------------------


@pytest.mark.parametrize(
    "name", ["PeterNeumann", "example.com/foo", "sum.golang.org", "é.example/log", "a"]
)
def test_valid_key_names(name: str) -> None:
    note.check_key_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "",
        "a+b",
        "+",
        "a b",
        " a",
        "a\tb",
        "a\nb",
        "a\x0bb",
        "a\u0085b",  # NEL: a Unicode space
        "a\u00a0b",
        "a\u1680b",
        "a\u2003b",
        "a\u2028b",
        "a\u202fb",
        "a\u3000b",
        "a\x01b",
        "a\x1fb",
        "a\ud800b",  # a lone surrogate is not UTF-8
    ],
)
def test_invalid_key_names(name: str) -> None:
    refused(lambda: note.check_key_name(name), "key name")
    refused(lambda: note.key_hash(name, PETER.public), "key name")
    refused(lambda: note.verifier_key(name, PETER.public), "key name")


def test_published_key_hashes_and_verifier_keys() -> None:
    public = peter_key().public_key().public_bytes_raw()
    assert public == PETER.public
    assert note.key_hash("PeterNeumann", public).hex() == "c74f20a3"
    assert note.verifier_key("PeterNeumann", public) == GO["verifier_key"]
    for text in [GO["verifier_key"], GO["other_verifier_key"], C2SP["verifier_key"]]:
        name, key = note.parse_verifier_key(text)
        assert note.verifier_key(name, key) == text
    # The Go checksum database's key: its base64 holds '+', split only at the first two.
    sumdb = note.parse_verifier_key(SUMDB["verifier_key"])
    assert sumdb.name == "sum.golang.org"
    assert note.key_hash(sumdb.name, sumdb.public).hex() == "033de0ae"
    assert note.verifier_key(*sumdb) == SUMDB["verifier_key"]


def test_the_key_hash_is_the_spec_formula() -> None:
    public = bytes(range(32))
    want = hashlib.sha256(b"log.example\n\x01" + public).digest()[:4]
    assert note.key_hash("log.example", public) == want


def test_key_hash_refuses_bad_keys() -> None:
    for bad in [b"", bytes(31), bytes(33)]:
        refused(lambda bad=bad: note.key_hash("a", bad), "32 bytes")
    with pytest.raises(TypeError):
        note.key_hash("a", PETER.public.hex())
    with pytest.raises(TypeError):
        note.check_key_name(b"a")


def test_every_mangled_verifier_key_is_refused() -> None:
    """Go's test: every proper substring and every one-byte change of the key is refused."""
    key = GO["verifier_key"]
    for i in range(len(key) + 1):
        for j in range(i + 1, len(key) + 1):
            if (i, j) != (0, len(key)):
                refused(lambda s=key[i:j]: note.parse_verifier_key(s))
    for i in range(len(key)):
        changed = key[:i] + chr(ord(key[i]) + 1) + key[i + 1 :]
        refused(lambda s=changed: note.parse_verifier_key(s))
    wrong_length, unknown_type = GO["bad_verifier_keys"]
    refused(lambda: note.parse_verifier_key(wrong_length), "a 32-byte key")
    refused(lambda: note.parse_verifier_key(unknown_type), "type Ed25519")


def test_verifier_key_refusals_name_the_rule() -> None:
    name, digest, key64 = GO["verifier_key"].split("+")
    refused(lambda: note.parse_verifier_key(f"{name}+{digest.upper()}+{key64}"), "lowercase hex")
    refused(lambda: note.parse_verifier_key(f"{name}+{digest}"), "base64")
    refused(lambda: note.parse_verifier_key(f"{name}+{digest}+{key64}+x"), "base64")
    refused(lambda: note.parse_verifier_key(f"{name}+{digest}+{key64.rstrip('W')}"), "base64")
    refused(lambda: note.parse_verifier_key(f"{name}+c74f20a4+{key64}"), "does not match")
    refused(lambda: note.parse_verifier_key(f"Peter+{digest}+{key64}"), "does not match")
    # Keys of 31 and 33 bytes, canonical base64, key hash made for them.
    for raw in [b"\x01" + PETER.public[:31], b"\x01" + PETER.public + b"\x00"]:
        digest2 = hashlib.sha256(b"x\n" + raw).hexdigest()[:8]
        vkey = f"x+{digest2}+{base64.b64encode(raw).decode()}"
        refused(lambda vkey=vkey: note.parse_verifier_key(vkey), "a 32-byte key")
    # Another type byte with a key hash made for it.
    raw = b"\x02" + PETER.public
    digest2 = hashlib.sha256(b"x\n" + raw).hexdigest()[:8]
    refused(
        lambda: note.parse_verifier_key(f"x+{digest2}+{base64.b64encode(raw).decode()}"), "type"
    )
    refused(lambda: note.parse_verifier_key(f"a b+{digest}+{key64}"), "key name")
    with pytest.raises(TypeError):
        note.parse_verifier_key(GO["verifier_key"].encode())


# --- signing ---------------------------------------------------------------------------


def test_sign_reproduces_go_byte_for_byte() -> None:
    assert note.sign_note(TEXT, "PeterNeumann", peter_key()) == GO["signed"]
    assert GO["signed"] == TEXT + "\n" + PETER_SIG


def test_sign_reproduces_a_sigsum_checkpoint() -> None:
    key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(SIGSUM["seed_hex"]))
    origin = SIGSUM["origin"]
    public = key.public_key().public_bytes_raw()
    assert origin.endswith(hashlib.sha256(public).hexdigest())
    body = note.format_checkpoint(origin, SIGSUM["size"], bytes.fromhex(SIGSUM["root_hex"]))
    assert note.sign_note(body, origin, key) == SIGSUM["signed"]
    assert note.open_note(SIGSUM["signed"], [(origin, public)]) == (body, [origin])


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "end in a newline"),
        ("abc", "end in a newline"),
        ("abc\ndef", "end in a newline"),
        ("a\x01b\n", "control"),
        ("a\rb\n", "control"),
        ("a\tb\n", "control"),
        ("\x00\n", "control"),
        ("a\ud800b\n", "UTF-8"),
    ],
)
def test_sign_refuses_bad_texts(text: str, match: str) -> None:
    refused(lambda: note.sign_note(text, "PeterNeumann", peter_key()), match)


def test_sign_refuses_bad_names_and_keys() -> None:
    refused(lambda: note.sign_note(TEXT, "Peter Neumann", peter_key()), "key name")
    refused(lambda: note.sign_note(TEXT, "", peter_key()), "key name")
    with pytest.raises(TypeError):
        note.sign_note(TEXT, "PeterNeumann", PETER.public)
    with pytest.raises(TypeError):
        note.sign_note(TEXT.encode(), "PeterNeumann", peter_key())


def test_texts_with_empty_lines_round_trip() -> None:
    """The spec's example text has an empty line; the signatures follow the last one."""
    poem = C2SP["unkeyed_signed"].split(f"\n{DASH} ")[0]
    assert "\n\n" in poem and poem.endswith("\n")
    for text in [poem, "\n", "a\n\n", "\n\nb\n", "a\n\n\n"]:
        key = Ed25519PrivateKey.generate()
        signed = note.sign_note(text, "log.example", key)
        public = key.public_key().public_bytes_raw()
        assert note.open_note(signed, {"log.example": public}) == (text, ["log.example"])


LINE = st.text(
    st.characters(blacklist_categories=["Cs"], blacklist_characters=[chr(c) for c in range(32)]),
    max_size=40,
)
NAME = st.text(
    st.characters(blacklist_categories=["Cs"]).filter(
        lambda c: not c.isspace() and c != "+" and ord(c) >= 32
    ),
    min_size=1,
    max_size=20,
)


@given(st.lists(LINE, min_size=1, max_size=6), NAME)
def test_sign_then_open_round_trips(lines: list[str], name: str) -> None:
    text = "".join(line + "\n" for line in lines)
    key = Ed25519PrivateKey.generate()
    public = key.public_key().public_bytes_raw()
    signed = note.sign_note(text, name, key)
    assert note.open_note(signed, [(name, public)]) == (text, [name])
    assert note.open_note(signed.encode("utf-8"), {name: public}) == (text, [name])
    other = Ed25519PrivateKey.generate().public_key().public_bytes_raw()
    refused(lambda: note.open_note(signed, [(name, other)]), "no signature")


# --- opening ---------------------------------------------------------------------------


def test_go_open_one_of_two_signers_known() -> None:
    msg = TEXT + "\n" + PETER_SIG + ENOCH_SIG
    assert note.open_note(msg, [PETER]) == (TEXT, ["PeterNeumann"])
    assert note.open_note(msg, [ENOCH]) == (TEXT, ["EnochRoot"])
    assert note.open_note(msg, [PETER, ENOCH]) == (TEXT, ["PeterNeumann", "EnochRoot"])
    assert note.open_note(msg, [ENOCH, PETER]) == (TEXT, ["PeterNeumann", "EnochRoot"])
    assert note.open_note(msg, dict([PETER, ENOCH])) == (TEXT, ["PeterNeumann", "EnochRoot"])
    refused(lambda: note.open_note(msg, []), "no signature of the note is by a known key")


def test_go_open_duplicates_are_read_once() -> None:
    enoch_abcd = ENOCH_SIG[:60] + "ABCD" + ENOCH_SIG[60:]
    msg = TEXT + "\n" + PETER_SIG + PETER_SIG + ENOCH_SIG + ENOCH_SIG + enoch_abcd
    assert note.open_note(msg, [PETER]) == (TEXT, ["PeterNeumann"])
    # The same key listed twice is one key, not an ambiguity.
    assert note.open_note(TEXT + "\n" + PETER_SIG, [PETER, ENOCH, PETER]) == (
        TEXT,
        ["PeterNeumann"],
    )


def test_a_known_key_with_a_bad_signature_refuses_the_note() -> None:
    bad = PETER_SIG[:60] + "ABCD" + PETER_SIG[60:]
    refused(lambda: note.open_note(TEXT + "\n" + bad, [PETER]), "line 1 .* does not verify")
    # Even beside a good signature of the same key, or of another known key.
    refused(lambda: note.open_note(TEXT + "\n" + PETER_SIG + bad, [PETER]), "line 2")
    refused(lambda: note.open_note(TEXT + "\n" + ENOCH_SIG + bad, [PETER, ENOCH]), "line 2")
    # The bad one is from an unknown key: ignored.
    assert note.open_note(TEXT + "\n" + ENOCH_SIG + bad, [ENOCH]) == (TEXT, ["EnochRoot"])
    # A signature of the wrong length from a known key does not verify either.
    digest = note.key_hash("PeterNeumann", PETER.public)
    short = f"{DASH} PeterNeumann {base64.b64encode(digest + bytes(10)).decode()}\n"
    refused(lambda: note.open_note(TEXT + "\n" + short, [PETER]), "does not verify")
    # The text was changed after signing.
    altered = TEXT.replace("problem", "answer", 1) + "\n" + PETER_SIG
    refused(lambda: note.open_note(altered, [PETER]), "does not verify")


def test_a_shared_name_or_hash_alone_is_another_key() -> None:
    """Spec: signatures sharing a name or an ID, but not both, with a known key are ignored."""
    misnamed = PETER_SIG.replace("PeterNeumann", "CarmenSandiego")
    rehashed = PETER_SIG.replace("x08g", "xxxx")
    for line in [misnamed, rehashed]:
        refused(lambda line=line: note.open_note(TEXT + "\n" + line, [PETER]), "no signature")
        assert note.open_note(TEXT + "\n" + line + PETER_SIG, [PETER]) == (
            TEXT,
            ["PeterNeumann"],
        )


def test_signature_lines_are_bounded() -> None:
    assert note.open_note(TEXT + "\n" + PETER_SIG * 100, [PETER]) == (TEXT, ["PeterNeumann"])
    for known in ([PETER], []):
        refused(
            lambda known=known: note.open_note(TEXT + "\n" + PETER_SIG * 101, known),
            "at most 100 signature lines",
        )


@pytest.mark.parametrize(
    "msg",
    [  # Go's malformed notes
        TEXT,
        TEXT + "\n",
        TEXT + "\n" + PETER_SIG[:-1],
        "\x01" + TEXT + "\n" + PETER_SIG,
        TEXT + "\n" + f"{DASH} Bad Name " + PETER_SIG.split()[2],
        TEXT + "\n" + PETER_SIG + "Unexpected line.\n",
    ],
)
def test_go_malformed_notes(msg: str) -> None:
    refused(lambda: note.open_note(msg, [PETER]))


def test_go_malformed_bytes() -> None:
    refused(lambda: note.open_note(b"\xff" + (TEXT + "\n" + PETER_SIG).encode(), [PETER]), "UTF-8")
    refused(lambda: note.open_note("\ud800" + TEXT + "\n" + PETER_SIG, [PETER]), "UTF-8")


SIG = PETER_SIG.split()[2]


@pytest.mark.parametrize(
    ("block", "match"),
    [
        ("\n", "end in a signature line"),
        (f"-- PeterNeumann {SIG}\n", "line 1 is malformed"),
        (f"\u2013 PeterNeumann {SIG}\n", "line 1 is malformed"),  # an en dash
        (f"{DASH}PeterNeumann {SIG}\n", "line 1 is malformed"),
        (f"{DASH} PeterNeumann  {SIG}\n", "line 1 is malformed"),
        (f"{DASH} PeterNeumann {SIG} \n", "line 1 is malformed"),
        (f"{DASH} PeterNeumann\n", "line 1 is malformed"),
        (f"{DASH} PeterNeumann \n", "line 1 is malformed"),
        (f"{DASH}  {SIG}\n", "line 1 is malformed"),
        (f"{DASH} Peter+Neumann {SIG}\n", "line 1 is malformed"),
        (f"{DASH} PeterNeumann {SIG.rstrip('=')}\n", "line 1 is malformed"),  # no padding
        (f"{DASH} PeterNeumann {SIG[:-2]}N=\n", "line 1 is malformed"),  # spare bits set
        (f"{DASH} PeterNeumann {SIG.replace('/', '_')}\n", "line 1 is malformed"),  # URL-safe
        (f"{DASH} PeterNeumann AAAAAA==\n", "line 1 is malformed"),  # 4 bytes: a hash, no sig
        (PETER_SIG + f"{DASH} PeterNeumann !!!!\n", "line 2 is malformed"),
        (PETER_SIG + "\n", "end in a signature line"),  # a trailing blank line
    ],
)
def test_malformed_signature_lines(block: str, match: str) -> None:
    refused(lambda: note.open_note(TEXT + "\n" + block, [PETER]), match)


def test_unknown_short_signatures_are_ignored() -> None:
    five = f"{DASH} other.example {base64.b64encode(bytes(5)).decode()}\n"
    assert note.open_note(TEXT + "\n" + five + PETER_SIG, [PETER]) == (TEXT, ["PeterNeumann"])


def test_control_characters_are_refused_even_when_signed() -> None:
    key = peter_key()
    for text in ["a\x01b\n", "a\rb\n", "tab\there\n"]:
        sig = note.key_hash("PeterNeumann", PETER.public) + key.sign(text.encode())
        signed = f"{text}\n{DASH} PeterNeumann {base64.b64encode(sig).decode()}\n"
        refused(lambda signed=signed: note.open_note(signed, [PETER]), "control characters")
        refused(lambda signed=signed: note.open_note(signed.encode(), [PETER]), "control")
    # Not in a signature line either, even an unknown one.
    stray = f"{DASH} other.example\x07 {base64.b64encode(bytes(9)).decode()}\n"
    refused(lambda: note.open_note(TEXT + "\n" + PETER_SIG + stray, [PETER]), "control")


def test_note_level_refusals() -> None:
    refused(lambda: note.open_note(TEXT + PETER_SIG, [PETER]), "blank line")
    refused(lambda: note.open_note((TEXT + "\n" + PETER_SIG).replace("\n", "\r\n"), [PETER]))
    refused(lambda: note.open_note(TEXT + "\n" + PETER_SIG + "\x7f", [PETER]), "end in")
    # A blank line among the signatures makes the lines above it text: unsigned text.
    refused(lambda: note.open_note(TEXT + "\n" + ENOCH_SIG + "\n" + ENOCH_SIG, [PETER]), "no sig")


def test_verifiers_are_checked() -> None:
    msg = TEXT + "\n" + PETER_SIG
    refused(lambda: note.open_note(msg, [("PeterNeumann", PETER.public[:31])]), "32 bytes")
    refused(lambda: note.open_note(msg, [("Peter Neumann", PETER.public)]), "key name")
    with pytest.raises(TypeError):
        note.open_note(msg, GO["verifier_key"])
    with pytest.raises(TypeError):
        note.open_note(msg, [["PeterNeumann", PETER.public]])
    with pytest.raises(TypeError):
        note.open_note(msg, [("PeterNeumann", PETER.public.hex())])
    with pytest.raises(TypeError):
        note.open_note(None, [PETER])


def test_two_keys_with_one_name_and_key_hash_are_refused() -> None:
    seen: dict[bytes, bytes] = {}
    for i in range(1 << 20):
        public = hashlib.sha256(i.to_bytes(4, "big")).digest()
        digest = note.key_hash("log.example", public)
        if digest in seen:
            break
        seen[digest] = public
    pair = [("log.example", seen[digest]), ("log.example", public)]
    refused(lambda: note.open_note(TEXT + "\n" + PETER_SIG, [*pair, PETER]), "share a name")


def test_c2sp_signed_note_example() -> None:
    key = note.parse_verifier_key(C2SP["verifier_key"])
    assert note.open_note(C2SP["signed"], [key]) == (C2SP["text"], ["example.com/foo"])
    refused(lambda: note.open_note(C2SP["unkeyed_signed"], [key, PETER]), "no signature")
    # Its signature under another key's name is someone else's.
    refused(lambda: note.open_note(C2SP["signed"], [("example.com/foo", PETER.public)]), "no sig")


# --- checkpoints -----------------------------------------------------------------------


def test_sum_golang_org_checkpoint() -> None:
    key = note.parse_verifier_key(SUMDB["verifier_key"])
    text, signers = note.open_note(SUMDB["signed"], [key])
    assert signers == ["sum.golang.org"]
    checkpoint = note.parse_checkpoint(text)
    assert checkpoint == note.Checkpoint(
        SUMDB["origin"], SUMDB["size"], base64.b64decode(SUMDB["root_base64"])
    )
    assert note.format_checkpoint(checkpoint.origin, checkpoint.size, checkpoint.root) == text
    forged = SUMDB["signed"].replace(str(SUMDB["size"]), str(SUMDB["size"] + 1))
    refused(lambda: note.open_note(forged, [key]), "does not verify")


def test_c2sp_checkpoint_example() -> None:
    example = V["c2sp_tlog_checkpoint"]
    text = example["signed"].split(f"\n{DASH} ")[0]
    checkpoint = note.parse_checkpoint(text)
    assert checkpoint.origin == example["origin"]
    assert checkpoint.size == example["size"]
    assert checkpoint.root == base64.b64decode(example["root_base64"])
    assert checkpoint.extensions == ()
    assert note.format_checkpoint(example["origin"], example["size"], checkpoint.root) == text
    refused(lambda: note.open_note(example["signed"], [PETER]), "no signature")


def test_go_tree_text_is_a_checkpoint_of_an_rfc6962_root() -> None:
    tree = V["go_sumdb_tree"]
    root = merkle.leaf_hash(tree["leaf"].encode())  # Go's RecordHash: the RFC 6962 leaf hash
    assert note.format_checkpoint(tree["origin"], tree["size"], root) == tree["text"]
    assert note.parse_checkpoint(tree["text"]) == note.Checkpoint(
        tree["origin"], tree["size"], root
    )
    for bad in tree["bad_texts"]:
        refused(lambda bad=bad: note.parse_checkpoint(bad), "tree size|root hash")


ROOT = bytes(range(32))
ROOT64 = base64.b64encode(ROOT).decode()
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
# 32 bytes leave the last base64 digit two unused low bits: setting one changes no byte.
SPARE_BITS = ROOT64[:-2] + _ALPHABET[_ALPHABET.index(ROOT64[-2]) ^ 1] + "="


def test_extensions_and_origins_round_trip() -> None:
    for origin, extensions in [
        ("example.com/log", ()),
        ("example.com/log", ("one", "two words", "+ and \u2014")),
        ("go.sum database tree", ()),  # spaces: clients must not assume the origin's form
        ("a+b \u00e9", ("\x7f",)),
    ]:
        text = note.format_checkpoint(origin, 7, ROOT, extensions)
        assert text == "".join(f"{line}\n" for line in [origin, "7", ROOT64, *extensions])
        assert note.parse_checkpoint(text) == note.Checkpoint(origin, 7, ROOT, tuple(extensions))
    assert note.format_checkpoint("o", 1, ROOT, ["x"]) == note.format_checkpoint(
        "o", 1, ROOT, ("x",)
    )


@pytest.mark.parametrize(
    ("size", "ok"),
    [
        ("0", True),
        ("1", True),
        ("18446744073709551615", True),
        ("18446744073709551616", False),
        ("99999999999999999999", False),
        ("100000000000000000000", False),
        ("00", False),
        ("01", False),
        ("-1", False),
        ("+1", False),
        (" 1", False),
        ("1 ", False),
        ("1_000", False),
        ("\uff11", False),  # a fullwidth digit
        ("\u0661", False),  # an Arabic-Indic digit
        ("0x10", False),
        ("1e3", False),
        ("", False),
    ],
)
def test_checkpoint_sizes(size: str, ok: bool) -> None:
    text = f"example.com/log\n{size}\n{ROOT64}\n"
    if ok:
        assert note.parse_checkpoint(text).size == int(size)
    else:
        refused(lambda: note.parse_checkpoint(text), "tree size")


@pytest.mark.parametrize(
    "root",
    [
        ROOT64.rstrip("="),
        SPARE_BITS,
        base64.b64encode(ROOT[:31]).decode(),
        base64.b64encode(ROOT + b"\x00").decode(),
        base64.urlsafe_b64encode(bytes([0xFB, 0xFF] * 16)).decode(),
        "",
        " " + ROOT64,
        ROOT.hex(),
    ],
)
def test_checkpoint_roots(root: str) -> None:
    refused(lambda: note.parse_checkpoint(f"example.com/log\n1\n{root}\n"), "root hash")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "newline"),
        (f"example.com/log\n1\n{ROOT64}", "newline"),
        ("example.com/log\n1\n", "three lines"),
        ("\n", "three lines"),
        (f"\n1\n{ROOT64}\n", "origin"),
        (f"example.com/log\n1\n{ROOT64}\n\n", "extension"),
        (f"example.com/log\n1\n{ROOT64}\nok\n\n", "extension"),
        (f"example.com/log\n1\n{ROOT64}\n\nafter\n", "extension"),
        (f"example.com/log\r\n1\n{ROOT64}\n", "origin"),
        (f"example.com/\x00log\n1\n{ROOT64}\n", "origin"),
        (f"example.com/log\n1\n{ROOT64}\nbad\x1b[0m\n", "extension"),
        (f"\ud800\n1\n{ROOT64}\n", "UTF-8"),
    ],
)
def test_malformed_checkpoints(text: str, match: str) -> None:
    refused(lambda: note.parse_checkpoint(text), match)


def test_checkpoints_cannot_be_built_invalid() -> None:
    refused(lambda: note.Checkpoint("o", -1, ROOT), "tree size")
    refused(lambda: note.Checkpoint("o", 2**64, ROOT), "tree size")
    refused(lambda: note.Checkpoint("o", 1, ROOT[:31]), "32 bytes")
    refused(lambda: note.Checkpoint("", 1, ROOT), "origin")
    refused(lambda: note.Checkpoint("a\nb", 1, ROOT), "origin")
    refused(lambda: note.Checkpoint("o", 1, ROOT, ("",)), "extension")
    refused(lambda: note.Checkpoint("o", 1, ROOT, ("a\nb",)), "extension")
    refused(lambda: note.format_checkpoint("o", 1, ROOT, ["ok", "a\tb"]), "extension")
    for bad in [
        lambda: note.Checkpoint("o", True, ROOT),
        lambda: note.Checkpoint("o", 1.0, ROOT),
        lambda: note.Checkpoint("o", 1, ROOT64),
        lambda: note.Checkpoint(b"o", 1, ROOT),
        lambda: note.Checkpoint("o", 1, ROOT, "ext"),
        lambda: note.Checkpoint("o", 1, ROOT, (b"ext",)),
        lambda: note.format_checkpoint("o", 1, ROOT, "ext"),
        lambda: note.parse_checkpoint(b"o\n1\n" + ROOT64.encode() + b"\n"),
    ]:
        with pytest.raises(TypeError):
            bad()
    checkpoint = note.Checkpoint("o", 1, ROOT, ["a"])
    assert checkpoint.extensions == ("a",)
    with pytest.raises(FrozenInstanceError):
        checkpoint.size = 2


def test_note_error_is_a_value_error() -> None:
    assert issubclass(NoteError, ValueError)
