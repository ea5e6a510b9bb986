"""What ``/proc`` shows of worker processes: children, descendants, accepted connections.

Tests of ``--workers`` see which worker holds a connection (the kernel decides
who accepts) and steer new connections to one worker by pausing the other
(``SIGSTOP``: a stopped process accepts nothing).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

_PRIVATE = re.compile(r"/chit-[^/]+/w(\d+)\.sock$")


def _stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2:].split()  # fields from the state on (3rd)


def parent(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[1]) if fields else None


def started(pid: int) -> int | None:
    """The process's start time (clock ticks since boot): tells a reused pid apart."""
    fields = _stat(pid)
    return int(fields[19]) if fields else None


def pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def children(pid: int) -> list[int]:
    return sorted(p for p in pids() if parent(p) == pid)


def descendants(pid: int) -> dict[int, int]:
    """Every process below ``pid``, with its start time."""
    found: dict[int, int] = {}
    todo = [pid]
    while todo:
        for child in children(todo.pop()):
            when = started(child)
            if when is not None:
                found[child] = when
                todo.append(child)
    return found


def alive(known: dict[int, int]) -> list[int]:
    """Those of ``known`` (pid: start time) still running (zombies count as gone)."""
    out = []
    for pid, when in known.items():
        fields = _stat(pid)
        if fields and int(fields[19]) == when and fields[0] != "Z":
            out.append(pid)
    return out


def naming(text: str) -> list[int]:
    """Processes whose command line holds ``text``."""
    found = []
    for pid in pids():
        with contextlib.suppress(OSError):
            if text.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
    return found


def socket_inodes(pid: int) -> set[int]:
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(int(target[8:-1]))
    return inodes


def unix_sockets() -> list[tuple[int, str, int]]:
    """``(state, path, inode)`` of every unix socket with a path."""
    rows = []
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 8:
            rows.append((int(parts[5], 16), parts[7], int(parts[6])))
    return rows


def accepted_unix(path: str, pid: int) -> int:
    """Connections ``pid`` accepted on the unix socket ``path`` (connected, not listening)."""
    mine = socket_inodes(pid)
    return sum(1 for state, where, inode in unix_sockets()
               if state == 3 and where == path and inode in mine)


def accepted_tcp(port: int, pid: int) -> int:
    """Established TCP connections to local ``port`` that ``pid`` holds (accepted by it)."""
    mine = socket_inodes(pid)
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                parts = line.split()
                local_port = int(parts[1].rsplit(":", 1)[1], 16)
                if local_port == port and parts[3] == "01" and int(parts[9]) in mine:
                    count += 1
    return count


def private_sockets(supervisor: int) -> dict[int, tuple[int, str]]:
    """``{index: (pid, path)}``: a supervisor's workers, by the private socket each listens on."""
    found: dict[int, tuple[int, str]] = {}
    listening = [(where, inode) for state, where, inode in unix_sockets() if state == 1]
    for pid in children(supervisor):
        mine = socket_inodes(pid)
        for where, inode in listening:
            match = _PRIVATE.search(where)
            if match and inode in mine:
                found[int(match.group(1))] = (pid, where)
    return found


def worker_indexes(supervisor: int) -> dict[int, int]:
    """``{index: pid}`` of a supervisor's workers."""
    return {index: pid for index, (pid, _) in private_sockets(supervisor).items()}


def listening_inodes(path: str) -> set[int]:
    """The inodes of the listening unix sockets bound at ``path``."""
    return {inode for state, where, inode in unix_sockets() if state == 1 and where == path}


def wait_for(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@contextlib.contextmanager
def paused(pid: int) -> Iterator[None]:
    """Stop ``pid`` (a worker we started) so it accepts nothing; continue it after."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)
