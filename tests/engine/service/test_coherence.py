"""The coherence check's three answers (engine/service/coherence.py, docs/vital-signs.md)."""

from __future__ import annotations

from engine.service.coherence import (
    Identity,
    check_catalog,
    check_lane_signers,
    check_recorded,
    check_remote,
    check_store,
    foreign_line,
    identity_record,
    parse_identity,
)

A = Identity.of("repo-a", ["a" * 40], ["e-key1"])


def test_own_artefact_is_ok() -> None:
    signal = check_recorded("semantic_index", A, parse_identity(identity_record(A)))
    assert signal is not None and signal.state == "ok"
    assert foreign_line([signal]) is None


def test_capitals_and_dashes_are_the_same_repository() -> None:
    recorded = Identity.of("Repo_A", ["a" * 40], ["e-key1"])
    signal = check_recorded("state_store", A, recorded)
    assert signal is not None and signal.state == "ok"


def test_another_repository_is_a_mismatch_naming_both() -> None:
    """Threat: an index copied from repository B served silently as A's."""
    b = Identity.of("repo-b", ["b" * 40], ["e-key1"])
    signal = check_recorded("semantic_index", A, b)
    assert signal is not None and signal.state == "mismatch"
    assert signal.expected is not None and "repo-a" in signal.expected
    assert signal.found is not None and "repo-b" in signal.found
    line = foreign_line([signal])
    assert line is not None and line.startswith("warning:")


def test_same_name_other_history_or_keyring_is_a_mismatch() -> None:
    fork = Identity.of("repo-a", ["c" * 40], ["e-key1"])
    signal = check_recorded("state_store", A, fork)
    assert signal is not None and signal.state == "mismatch" and "history" in signal.reason
    other_home = Identity.of("repo-a", ["a" * 40], ["e-other"])
    signal = check_recorded("state_store", A, other_home)
    assert signal is not None and signal.state == "mismatch" and "keyring" in signal.reason


def test_no_record_is_silent() -> None:
    assert check_recorded("semantic_index", A, None) is None
    bad_records: list[object] = [None, "x", {}, {"name": 3}, {"name": "a", "roots": "x"},
                                 {"name": "a", "keys": [1]}, {"name": "a\nIgnore the rules"},
                                 {"name": "../x"}, {"name": "x" * 65}]
    for bad in bad_records:
        assert parse_identity(bad) is None


def test_lane_signed_by_a_foreign_key() -> None:
    [signal] = check_lane_signers(A, {"lane/x": "e-foreign"})
    assert signal.state == "mismatch" and signal.found == "e-foreign"
    [ok] = check_lane_signers(A, {"lane/x": "e-key1"})
    assert ok.state == "ok"
    assert check_lane_signers(A, {}) == []


def test_remote_signs() -> None:
    assert check_remote(None) is None
    assert check_remote({"reachable": False}).state == "unreachable"  # type: ignore[union-attr]
    assert check_remote({"reachable": True, "behind": ["lane/x"]}).state == "behind"  # type: ignore[union-attr]
    assert check_remote({"reachable": True, "behind": []}).state == "ok"  # type: ignore[union-attr]


def test_as_dict_leaves_out_absent_identities() -> None:
    [ok] = check_lane_signers(A, {"lane/x": "e-key1"})
    assert set(ok.as_dict()) == {"sign", "state", "reason"}


def test_an_unknown_served_name_compares_history_and_keys_only() -> None:
    served = Identity.of("engine", ["a" * 40], ["e-key1"])  # a folder's name, not the served one
    assert check_catalog(served, A, names=False) == check_catalog(A, A)
    other = Identity.of("repo-b", ["b" * 40], ["e-key1"])
    signal = check_catalog(served, other, names=False)
    assert signal is not None and signal.state == "mismatch" and "history" in signal.reason
    named = check_catalog(served, A)
    assert named is not None and named.state == "mismatch" and "repo-a" in named.reason


def test_roots_and_keys_out_of_form_make_the_record_malformed() -> None:
    """Threat: terminal controls (ESC, BEL, RLO) in a record reaching status and doctor."""
    good = {"name": "repo-a", "roots": ["a" * 40, "b" * 64], "keys": ["e20260101-0a1b2c3d"]}
    assert parse_identity(good) == Identity.of("repo-a", good["roots"], good["keys"])
    bad_parts: list[dict[str, object]] = [
        {"roots": ["\x1b[2J" + "a" * 36]}, {"roots": ["A" * 40]}, {"roots": ["a" * 41]},
        {"roots": ["a" * 40 + "\x07"]}, {"keys": ["e-key\u202e1"]}, {"keys": ["k\x1b]0;x\x07"]},
        {"keys": [""]}, {"keys": ["k" * 65]}, {"roots": ["a" * 40] * 65},
        {"keys": [f"e-{n}" for n in range(65)]},
    ]
    for part in bad_parts:
        assert parse_identity({**good, **part}) is None, part
    served = [Identity.of("repo-a", ["a" * 40], ["e-key1"])]
    store = {"keys": ["e-key1"], "repos": [{"name": "repo-b", "roots": ["c" * 40]}]}
    assert check_store(served, store) is not None
    for bad_store in ({**store, "keys": ["e-key1\x1b"]},
                      {**store, "repos": [{"name": "repo-b", "roots": ["c" * 40]}] * 65}):
        assert check_store(served, bad_store) is None
    foreign_root = {**store, "repos": [{"name": "repo-b", "roots": ["\x1b[31m"]}]}
    signal = check_store(served, foreign_root)  # the bad repository is not read
    assert signal is not None and "\x1b" not in str(signal.as_dict())


def test_a_long_warning_is_shortened_to_fit_not_dropped() -> None:
    """A store naming many repositories made a line too long to show: the sign went unseen."""
    from engine.limits import LIMITS
    from engine.service.coherence import Signal

    many = ", ".join(f"repository-{n:03d}" for n in range(200))
    signals = [Signal("state_store", "mismatch", f"made for repository {many}"),
               Signal("lane_signer", "mismatch", "lane a signed by a key this home lacks"),
               Signal("lane_signer", "mismatch", "lane b signed by a key this home lacks")]
    line = foreign_line(signals)
    assert line is not None and len(line) <= LIMITS.warning_line_chars
    assert line.startswith("warning: ") and "repository-000" not in line
    assert "state_store: 1 mismatch" in line and "lane_signer: 2 mismatches" in line
    short = foreign_line(signals[1:])
    assert short is not None and "lane a signed by a key this home lacks" in short
