"""Tests for engine/git/transport.py: the git command's environment, time bound and scrubbing."""

from __future__ import annotations

import http.server
import os
import threading
import time
from pathlib import Path
from typing import Any

import pygit2
import pytest

import engine.git.remote as remote_module
from engine.auth.sealing import NO_SEALING
from engine.errors import ConfigurationError
from engine.git.handle import Handle
from engine.git.remote import PushOutcome, Remote
from engine.git.transport import GitRun, RemoteURL, redact, run_git, scrub
from engine.limits import LIMITS
from tests.engine.git.remote_helpers import make_origin


@pytest.mark.parametrize(("url", "shown"), [
    ("https://alice:s3cret@git.example.org/org/app.git", "https://***@git.example.org/org/app.git"),
    ("https://ghp_TOKEN123@github.com/org/app.git", "https://***@github.com/org/app.git"),
    ("ssh://git@git.example.org:2222/org/app.git", "ssh://***@git.example.org:2222/org/app.git"),
    ("git@git.example.org:org/app.git", "git@git.example.org:org/app.git"),
    ("/srv/git/app.git", "/srv/git/app.git"),
    ("file:///srv/git/app.git", "file:///srv/git/app.git"),
])
def test_userinfo_is_redacted(url: str, shown: str) -> None:
    """Threat: a password or token embedded in a remote URL reaching a log or a status."""
    assert redact(url) == shown
    remote = RemoteURL(url)
    assert str(remote) == repr(remote)[len("RemoteURL('"):-2] == shown
    assert remote.shown == shown


def test_scrub_hides_secrets_controls_and_length() -> None:
    """Threat: git's error text carrying a URL's password, or terminal control sequences."""
    url = RemoteURL("https://bob:pa%40ss@h.example/x.git")
    said = url.scrub("fatal: unable to access 'https://bob:pa@ss@h.example/x.git/': "
                     "\x1b[31mdenied\u202e pa@ss\n")
    assert "pa@ss" not in said and "pa%40ss" not in said and "\x1b" not in said
    assert "\u202e" not in said and "\n" not in said
    assert len(scrub("x" * 10_000)) == LIMITS.remote_error_chars


@pytest.mark.parametrize("bad", ["", " ", "-uhack", "ext::sh -c touch% /tmp/pwned",
                                 "fd::3", "a\nb", "x" * (LIMITS.remote_url_chars + 1)])
def test_urls_that_run_commands_or_are_options_are_refused(bad: str) -> None:
    """Threat: a remote URL that makes git run a command (ext::) or read an option."""
    with pytest.raises(ConfigurationError):
        RemoteURL(bad)


def test_the_command_environment_is_clean(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Threat: a chit token in the engine's environment reaching git, ssh or a credential
    helper, or a variable redirecting the command to another repository."""
    repo = make_origin(tmp_path / "r.git")
    monkeypatch.setenv("CHIT_TOKEN", "chit_secret_token_text")
    monkeypatch.setenv("CHIT_HOME", "/elsewhere")
    monkeypatch.setenv("GIT_INDEX_FILE", "/tmp/other-index")
    monkeypatch.setenv("GIT_ASKPASS", "/usr/bin/ssh-askpass")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/run/agent.sock")
    run = run_git(repo.path, ["-c", "alias.showenv=!env", "showenv"])
    assert run.ok, run.stderr
    env = dict(line.split("=", 1) for line in run.stdout.splitlines() if "=" in line)
    assert "chit_secret_token_text" not in run.stdout and "CHIT_HOME" not in env
    assert "GIT_INDEX_FILE" not in env
    assert env["GIT_TERMINAL_PROMPT"] == "0" and env["GIT_ASKPASS"] == ""
    assert env["SSH_AUTH_SOCK"] == "/run/agent.sock"  # git's own credentials still work


def test_the_url_is_in_the_environment_not_the_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Threat: a URL's password in the command line, which every user of the host can list."""
    origin = make_origin(tmp_path / "origin.git")
    url = RemoteURL(os.fspath(tmp_path / "origin.git"))
    seen: list[list[str]] = []
    real = remote_module.run_git

    def recording(git_dir: str, args: list[str], **kw: Any) -> GitRun:
        seen.append(list(args))  # then the real git runs
        return real(git_dir, args, **kw)

    monkeypatch.setattr(remote_module, "run_git", recording)
    heads = Remote(_handle(origin), url).heads(["refs/heads/master"])
    assert heads == {"refs/heads/master": origin.references["refs/heads/master"].target}
    assert seen and all(os.fspath(tmp_path) not in arg for args in seen for arg in args)


def test_a_command_past_its_time_is_killed_with_its_children(tmp_path: Path) -> None:
    """Threat: a hung remote (or credential helper) holding a lane's lock for ever."""
    repo = make_origin(tmp_path / "r.git")
    pid_file = tmp_path / "child.pid"
    run = run_git(repo.path, ["-c", f"alias.hang=!echo $$ > {pid_file}; exec sleep 120",
                              "hang"], timeout=1.0)
    assert run.timed_out and not run.ok
    child = int(pid_file.read_text())
    for _ in range(200):  # the kill is sent; wait for the process table to say so
        if not _alive(child):
            break
        time.sleep(0.05)
    assert not _alive(child)


def test_a_remote_asking_for_credentials_fails_instead_of_prompting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Threat: git waiting on a terminal prompt (or a dialog) for a password, wedging the
    engine; and the URL's password echoed back in the reason."""
    monkeypatch.setenv("HOME", str(tmp_path))  # no credential helper of the user's
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    origin = make_origin(tmp_path / "origin.git")
    with _asking_server() as port:
        for url in (f"http://127.0.0.1:{port}/org/app.git",
                    f"http://carol:hunter2pw@127.0.0.1:{port}/org/app.git"):
            remote = Remote(_handle(origin), RemoteURL(url))
            result = remote.push({"refs/heads/agent/x": origin.references[
                "refs/heads/master"].target})
            assert result.outcome is PushOutcome.FAILED
            assert result.reason is not None and "hunter2pw" not in result.reason
            assert "timed out" not in result.reason


# -- helpers ----------------------------------------------------------------------------


def _handle(repo: pygit2.Repository) -> Handle:
    return Handle(repo.path, NO_SEALING)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"  # a zombie is gone
    except OSError:
        return False


class _AskForCredentials(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="git"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_GET

    def log_message(self, *_args: object) -> None:
        return None


class _asking_server:
    def __enter__(self) -> int:
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AskForCredentials)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return int(self.server.server_address[1])

    def __exit__(self, *_exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

