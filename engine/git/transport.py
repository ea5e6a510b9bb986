"""The ``git`` command, for a remote's transport only, in a clean controlled environment.

pygit2 does everything local; fetches and pushes to a repository's remote run
``git`` itself so the operator's credentials (ssh agent, credential helpers)
work and a push can be atomic. The command gets no terminal, no chit variable,
no hooks, a short list of transports, bounded time and output, and the URL in
its environment rather than its arguments; whatever it says is scrubbed of URL
userinfo before chit keeps or shows it (docs/architecture.md, "Lanes on the
organisation's remote").
"""

from __future__ import annotations

import hashlib
import os
import re
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass
from urllib.parse import unquote

from engine.errors import ConfigurationError
from engine.limits import LIMITS

__all__ = ["GitRun", "RemoteURL", "command_env", "redact", "run_git", "scrub"]

_PASSED_ENV = (
    "PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "XDG_CONFIG_HOME",
    "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM",
    "GIT_EXEC_PATH", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_SSH_VARIANT", "SSH_AUTH_SOCK",
    "GIT_SSL_CAINFO", "GIT_SSL_CAPATH", "SSL_CERT_FILE", "SSL_CERT_DIR",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY",
    "http_proxy", "https_proxy", "no_proxy", "all_proxy",
)
"""What git may need from the engine's environment: where programs and the user's
configuration are, the ssh agent, certificates and proxies. Nothing else passes:
no ``CHIT_*`` (a token), no ``GIT_DIR`` or ``GIT_*`` that would redirect the
command, no askpass program."""

_CONFIG = (
    # Transports a remote may use: paths and file://, ssh (and scp-like
    # user@host:path), http(s) and git://. Never ext:: or fd::, which run
    # commands or read descriptors.
    ("protocol.allow", "never"),
    ("protocol.file.allow", "always"),
    ("protocol.ssh.allow", "always"),
    ("protocol.https.allow", "always"),
    ("protocol.http.allow", "always"),
    ("protocol.git.allow", "always"),
    # No hook of the engine's repository runs (pre-push, reference-transaction).
    ("core.hooksPath", os.devnull),
    # No background work left behind by a fetch.
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("fetch.writeCommitGraph", "false"),
)

_SCHEME_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@")
_FORBIDDEN_URL_CHARS = re.compile(r"[\x00-\x1f\x7f]")


def redact(url: str) -> str:
    """``url`` with the userinfo of a ``scheme://userinfo@host`` form replaced by ``***``.

    A scp-like ``user@host:path`` keeps its user (it cannot hold a password);
    a path has nothing to redact.
    """
    return _SCHEME_USERINFO.sub(r"\1***@", url)


def scrub(text: str, secrets: tuple[str, ...] = ()) -> str:
    """Text from git made safe to keep and show.

    Userinfo of every ``scheme://userinfo@`` in it is replaced (:func:`redact`),
    each string of ``secrets`` too, every character that is not printable
    (control, line-separator, bidi) becomes a space, and the result is cut to
    ``LIMITS.remote_error_chars`` characters.

    Args:
        text: git's output.
        secrets: Strings never to show (a URL's password, raw and decoded).

    Returns:
        The scrubbed text, stripped.
    """
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    text = redact(text)
    # Only printable text: no control, line-separator or bidi characters.
    text = "".join(c if c.isprintable() else " " for c in text).strip()
    text = re.sub(r" {2,}", " ", text)
    limit = LIMITS.remote_error_chars
    return text if len(text) <= limit else text[: limit - 1] + "…"


class RemoteURL:
    """A remote's URL (operator configuration), shown only with its userinfo redacted.

    ``str()`` and ``repr()`` give the redacted form; the URL itself only
    reaches git, through the command's environment (never its arguments, which
    every user of the host can list).

    Args:
        url: Any URL git accepts for fetch and push: a path, ``file://``,
            ``ssh://``, scp-like ``user@host:path``, ``https://``, ``git://``.

    Raises:
        ConfigurationError: If it is empty, longer than
            ``LIMITS.remote_url_chars``, holds a control character, starts with
            ``-`` or names a remote helper (``transport::address``).
    """

    def __init__(self, url: str) -> None:
        if not isinstance(url, str) or not url.strip():
            raise ConfigurationError("a remote URL must be a non-empty string")
        if len(url) > LIMITS.remote_url_chars or _FORBIDDEN_URL_CHARS.search(url):
            raise ConfigurationError("the remote URL is too long or holds control characters")
        if url.startswith("-"):
            raise ConfigurationError("a remote URL may not start with '-'")
        if re.match(r"[A-Za-z][A-Za-z0-9+.-]*::", url):
            raise ConfigurationError(
                "remote helpers (transport::address) are not accepted; use a path, "
                "file://, ssh://, user@host:path, https:// or git://"
            )
        self._url = url
        self.shown = redact(url)
        """The URL with its userinfo redacted: what logs, status and errors show."""
        # Inside the command's config, under a name no operator's remote has.
        self.name = "chit-" + hashlib.sha256(url.encode()).hexdigest()[:16]
        self._secrets = _userinfo_secrets(url)

    def __repr__(self) -> str:
        return f"RemoteURL({self.shown!r})"

    def __str__(self) -> str:
        return self.shown

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemoteURL) and other._url == self._url

    def __hash__(self) -> int:
        return hash(self._url)

    def scrub(self, text: str) -> str:
        """:func:`scrub` of ``text``, also hiding this URL's userinfo wherever it appears."""
        return scrub(text, self._secrets)

    def config(self) -> tuple[tuple[str, str], ...]:
        """The command configuration naming this URL as the remote :attr:`name`."""
        return ((f"remote.{self.name}.url", self._url),)


def _userinfo_secrets(url: str) -> tuple[str, ...]:
    """The userinfo of ``scheme://userinfo@host`` and its percent-decoded form, if any."""
    match = re.match(r"[A-Za-z][A-Za-z0-9+.-]*://([^/@\s]*)@", url)
    if match is None or not match.group(1):
        return ()
    raw = match.group(1)
    parts = {raw, unquote(raw)}
    for value in (raw, unquote(raw)):
        if ":" in value:
            parts.add(value.split(":", 1)[1])
    return tuple(sorted((p for p in parts if len(p) >= 3), key=len, reverse=True))


@dataclass(frozen=True)
class GitRun:
    """What one ``git`` command did.

    Attributes:
        returncode: Its exit status (``-9`` when killed past its time).
        stdout: Its standard output (UTF-8, undecodable bytes replaced).
        stderr: Its standard error, unscrubbed: scrub before keeping it.
        timed_out: Whether it was killed after ``LIMITS.remote_command_seconds``.
    """

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool

    @property
    def ok(self) -> bool:
        """True iff it exited 0 in time."""
        return self.returncode == 0 and not self.timed_out


def command_env(config: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """The environment of a ``git`` command: the passed variables, no prompts, ``config``."""
    env = {name: os.environ[name] for name in _PASSED_ENV if name in os.environ}
    env.setdefault("PATH", os.defpath)
    env.update(
        {
            "GIT_TERMINAL_PROMPT": "0",  # never ask for a user name or password
            "GIT_ASKPASS": "",  # set and empty: no askpass program, not even core.askPass
            "SSH_ASKPASS_REQUIRE": "never",
            "GCM_INTERACTIVE": "never",  # Git Credential Manager: no dialog
            "LC_ALL": "C",  # messages chit can read
        }
    )
    entries = _CONFIG + config
    env["GIT_CONFIG_COUNT"] = str(len(entries))
    for i, (key, value) in enumerate(entries):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env


def run_git(
    git_dir: str,
    args: list[str],
    *,
    config: tuple[tuple[str, str], ...] = (),
    timeout: float | None = None,
) -> GitRun:
    """Run ``git --git-dir=GIT_DIR ARGS`` with no terminal, bounded in time and output.

    The command runs in a session of its own (no controlling terminal, so
    neither git nor ssh can prompt), stdin closed, with the environment of
    :func:`command_env`. Past ``timeout`` the whole process group (git, ssh,
    a credential helper) is killed.

    Args:
        git_dir: The repository's common git directory.
        args: The subcommand and its arguments (fixed by chit: ref names chit
            validated, object ids, the remote's configured name).
        config: Extra ``key=value`` configuration for this command.
        timeout: Seconds (default ``LIMITS.remote_command_seconds``).

    Returns:
        What it did; a missing ``git`` program is exit status 127.
    """
    limit = LIMITS.remote_command_seconds if timeout is None else timeout
    argv = ["git", f"--git-dir={git_dir}", *args]
    try:
        proc = subprocess.Popen(  # noqa: S603 -- fixed argv, no shell
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=command_env(config),
            cwd=git_dir,
            start_new_session=True,
            close_fds=True,
        )
    except OSError:
        return GitRun(127, "", "git could not be started", False)
    out, err, timed_out = _collect(proc, time.monotonic() + limit)
    return GitRun(
        proc.returncode if not timed_out else -9,
        out.decode("utf-8", "replace"),
        err.decode("utf-8", "replace"),
        timed_out,
    )


def _collect(proc: subprocess.Popen[bytes], deadline: float) -> tuple[bytes, bytes, bool]:
    """Read both pipes until they close and the command exits, or until ``deadline``.

    Past ``deadline`` the command's whole process group is killed. At most
    ``LIMITS.remote_output_bytes`` of each pipe are kept; the rest is read
    and dropped, so a talkative remote cannot fill the engine's memory.
    """
    if proc.stdout is None or proc.stderr is None:
        raise RuntimeError("git was started without pipes")
    budget = LIMITS.remote_output_bytes
    out, err = bytearray(), bytearray()
    kept = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    timed_out = False
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        selector.register(proc.stderr, selectors.EVENT_READ)
        while selector.get_map() and not timed_out:
            left = deadline - time.monotonic()
            timed_out = left <= 0
            for key, _ in selector.select(max(left, 0)):
                data = os.read(key.fd, 65536)
                if not data:
                    selector.unregister(key.fileobj)
                    continue
                buffer = kept[key.fd]
                buffer += data[: max(0, budget - len(buffer))]
    if not timed_out:
        try:
            proc.wait(max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            timed_out = True
    if timed_out:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.stdout.close()
    proc.stderr.close()
    proc.wait()
    return bytes(out), bytes(err), timed_out
