"""Policy evaluation per call with a 200-rule policy, beside the token check, in the same run.

The policy (built below, ``default = "deny"``) has 200 rules, as an organisation
with 90 teams might write it: 20 deny rules for every agent (migrations,
production infrastructure, CI files, delegation, ...) and, per team, an allow
rule for reading its service and the shared docs and one for writing its
service, with agent patterns ``team-NN-*`` and ``team-NN-*.**``; plus
``paths.forbidden`` and two rate limit entries (which evaluation only selects).

Each call is ``write_file`` by ``team-57-bot`` on a path in its service, decided
by ``policy.evaluate`` (one Request, built outside the timing unless stated):

- ``evaluate``: the same call again and again (what the engine sees while an
  agent edits one file: the memoised rule selection and path facts are warm);
- ``evaluate_new_path``: every call names a path never seen before (the rule
  selection for the agent and tool is warm; every path match is computed);
- ``evaluate_new_agent``: the rule selections dropped first (the first call of an
  agent and tool: which of the 200 rules apply is worked out again);
- ``evaluate_cold``: every memo dropped, the policy's index included (the first
  call after the policy is loaded or reloaded);
- ``evaluate_refused``: a write the deny rules refuse (``rules[0]``);
- ``request_and_evaluate``: building the ``Request`` model as well.

The token check is ``verify_at_time`` of a 4-block token (root, then ops, paths
and expiry attenuations), warm and cold as in bench_authorize.py. Start-up checks
make sure each call is decided as expected. Timings are the median per-call time
over 7 interleaved rounds (each round times every case for about 0.2 s).

Run: ``PYTHONPATH=. .venv/bin/python bench/bench_policy.py``.
"""

from __future__ import annotations

import itertools
import json
import platform
import secrets
import statistics
import sys
import timeit
from collections.abc import Callable

import policy
from engine.auth import caveats, verify
from engine.auth import token as t
from policy import _agents
from policy import paths as ppaths

NOW = 1_800_000_000
AGENT = "team-57-bot"
PATH = "services/svc57/api/handlers.py"
REFUSED_PATH = "services/svc57/migrations/0042_users.py"
REPEAT = 7
TARGET_REPEAT_S = 0.2
TARGET_US = 20.0
TEAMS = 90

GLOBAL_DENIES = [
    ('operations = ["write"]', '["**/migrations/**"]', "migrations are written by people"),
    ('operations = ["write"]', '["infra/prod/**"]', "production infrastructure is off limits"),
    ('operations = ["write"]', '[".github/workflows/**", ".gitlab-ci.yml"]', "CI files"),
    ('operations = ["write"]', '["**/package-lock.json", "**/poetry.lock"]', "lock files"),
    ('operations = ["write"]', '["**/*.min.js", "**/vendor/**"]', "generated and vendored"),
    ('operations = ["write", "commit"]', '["LICENSE", "NOTICE"]', "legal files"),
    ('operations = ["read", "write"]', '["**/*.p12", "**/*.keystore"]', "key stores"),
    ('operations = ["read", "write"]', '["secrets/**", "**/secrets.yaml"]', "secrets"),
    ('operations = ["write"]', '["**/CODEOWNERS"]', "ownership"),
    ('operations = ["write"]', '["db/schema.sql", "db/seeds/**"]', "the database schema"),
    ('tools = ["delete_file"]', '["**/*.proto"]', "published protocols are not deleted"),
    ('tools = ["move_file"]', '["services/*/api/**"]', "public API modules stay put"),
    ('operations = ["write"]', '["**/Dockerfile", "**/*.dockerfile"]', "images"),
    ('operations = ["write"]', '["terraform/**", "**/*.tf"]', "terraform"),
    ('operations = ["write"]', '["**/*.sh"]', "shell scripts"),
    ('operations = ["write"]', '["services/*/config/prod.yaml"]', "production config"),
    ('operations = ["write"]', '["docs/legal/**", "docs/security/**"]', "reviewed documents"),
    ('operations = ["write"]', '["**/__snapshots__/**"]', "test snapshots"),
]


def policy_text() -> str:
    out = ['version = 1', 'default = "deny"', "",
           "[paths]", 'forbidden = ["**/.env", "**/*.pem", "**/id_rsa", "**/id_ed25519"]', ""]
    for selector, paths, reason in GLOBAL_DENIES:
        out += ["[[rules]]", 'effect = "deny"', selector, f"paths = {paths}",
                f'reason = "{reason}"', ""]
    out += ["[[rules]]", 'effect = "deny"', 'tools = ["issue_sub_token"]',
            'agents = ["team-*.**"]', 'reason = "helpers do not delegate further"', ""]
    out += ["[[rules]]", 'effect = "deny"', 'agents = ["contractor-*", "contractor-*.**"]',
            'operations = ["commit"]', 'reason = "contractors stage; employees commit"', ""]
    for n in range(TEAMS):
        team = f'["team-{n:02d}-*", "team-{n:02d}-*.**"]'
        out += ["[[rules]]", 'effect = "allow"', f"agents = {team}",
                'operations = ["none", "read"]',
                f'paths = ["services/svc{n:02d}/**", "docs/**", "README.md"]', ""]
        out += ["[[rules]]", 'effect = "allow"', f"agents = {team}",
                'operations = ["write", "commit", "sub-token:issue"]',
                f'paths = ["services/svc{n:02d}/**", "docs/svc{n:02d}/**"]', ""]
    out += ["[[rate_limits]]", 'agents = ["team-*", "team-*.**"]', "calls = 600",
            "per_seconds = 60", "", "[[rate_limits]]", 'tools = ["commit"]', "calls = 60",
            "per_seconds = 3600", ""]
    return "\n".join(out)


POLICY_CACHES = [ppaths._is_valid_path, ppaths._is_valid_glob, ppaths._match, ppaths.fold_path,
                 ppaths._fold_glob, ppaths._deny_matches_cached, _agents.agent_matches]
TOKEN_CACHES = [t._parse, verify._analyse, verify._block, verify._block_caveats, caveats.intersect]


def chit_token() -> tuple[str, bytes]:
    key = secrets.token_bytes(32)
    text = t.mint(key, "k1", agent=AGENT, operations=["read", "write", "commit"],
                  paths=["services/**"], expires_at=NOW + 3600)
    text = t.attenuate(text, operations=["read", "write"])
    text = t.attenuate(text, paths=["services/svc57/**"])
    text = t.attenuate(text, expires_at=NOW + 600)
    return text, key


def _medians_per_call(fns: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Median per-call time of each function over REPEAT interleaved rounds.

    Every round times every function once (about TARGET_REPEAT_S each), so a burst
    of load on this shared machine lands on all of them alike.
    """
    timers, numbers = {}, {}
    for name, fn in fns.items():
        timers[name] = timeit.Timer(fn)
        number, elapsed = timers[name].autorange()
        numbers[name] = max(1, round(number * TARGET_REPEAT_S / elapsed))
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(REPEAT):
        for name, timer in timers.items():
            samples[name].append(timer.timeit(numbers[name]) / numbers[name])
    return {name: statistics.median(values) for name, values in samples.items()}


def write(path: str) -> policy.Request:
    return policy.Request(agent=AGENT, tool="write_file", operation="write", paths=(path,),
                          content_bytes=2048, staged_bytes=8192, staged_files=3)


def main() -> None:
    pol = policy.load(policy_text())
    if len(pol.rules) != 200:
        raise SystemExit(f"the policy has {len(pol.rules)} rules, expected 200")
    request, refused = write(PATH), write(REFUSED_PATH)
    text, key = chit_token()
    lookup = {"k1": key}.get

    def run_evaluate() -> policy.Decision:
        return policy.evaluate(pol, request)

    fresh = (write(f"services/svc57/gen/m{i}.py") for i in itertools.count())

    def run_new_path() -> policy.Decision:
        return policy.evaluate(pol, next(fresh))

    def run_new_agent() -> policy.Decision:
        index = pol._index
        index.selections.clear()
        index.rate_selections.clear()
        _agents.agent_matches.cache_clear()
        return policy.evaluate(pol, request)

    def run_cold() -> policy.Decision:
        for cached in POLICY_CACHES:
            cached.cache_clear()
        pol._index = None  # the memoised rule selections
        return policy.evaluate(pol, request)

    def run_refused() -> policy.Decision:
        return policy.evaluate(pol, refused)

    def run_request_and_evaluate() -> policy.Decision:
        return policy.evaluate(pol, write(PATH))

    def run_token() -> object:
        return verify.verify_at_time(text, lookup, NOW)

    def run_token_cold() -> object:
        for cached in TOKEN_CACHES:
            cached.cache_clear()
        return verify.verify_at_time(text, lookup, NOW)

    allowed = run_evaluate()
    denied = run_refused()
    checks = {
        "allowed by team 57's write rule": allowed.allowed and allowed.rule == "rules[135]",
        "a new path allowed": run_new_path().allowed,
        "cold allowed": run_cold().allowed,
        "new agent allowed": run_new_agent().allowed,
        "migrations refused by rules[0]": (not denied.allowed) and denied.rule == "rules[0]",
        "another team refused": not policy.evaluate(
            pol, write("services/svc58/api/handlers.py")).allowed,
        "token verifies": run_token().agent == AGENT,  # type: ignore[attr-defined]
    }
    failed = [name for name, ok in checks.items() if not ok]
    if failed:
        raise SystemExit(f"start-up check failed: {', '.join(failed)}")

    timings = _medians_per_call({
        "evaluate": run_evaluate,
        "evaluate_new_path": run_new_path,
        "evaluate_new_agent": run_new_agent,
        "evaluate_cold": run_cold,
        "evaluate_refused": run_refused,
        "request_and_evaluate": run_request_and_evaluate,
        "token_check": run_token,
        "token_check_cold": run_token_cold,
    })
    us = {name: round(seconds * 1e6, 2) for name, seconds in timings.items()}
    result = {
        "benchmark": "policy evaluation per call, 200 rules (default deny), beside the token "
                     "check (4-block token)",
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "repeat": REPEAT,
        "rules": len(pol.rules),
        **{f"{name}_us": value for name, value in us.items()},
        "ratio_evaluate_over_token_check": round(timings["evaluate"] / timings["token_check"], 3),
        "target_evaluate_us": TARGET_US,
        "met": us["evaluate"] < TARGET_US,
        "met_new_path": us["evaluate_new_path"] < TARGET_US,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
