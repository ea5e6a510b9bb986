"""Where ``chit engine serve`` listens: a unix socket (``0600``) or a loopback TCP port.

The socket file is made so that no other user can ever connect, and a path that
is not this user's stale socket is never replaced (docs/engine-api.md, "The
socket file"); TCP is loopback only.
"""

from __future__ import annotations

import contextlib
import grp
import ipaddress
import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DEFAULT_SOCKET_NAME", "Listener", "bind_tcp", "bind_unix", "parse_listen"]

DEFAULT_SOCKET_NAME = "engine.sock"
_SUN_PATH_MAX = 107  # bytes in sockaddr_un.sun_path, less the terminating NUL (Linux)


@dataclass
class Listener:
    """A bound, listening socket and how edges reach it.

    Attributes:
        sock: The listening socket, handed to uvicorn.
        url: What ``chit mcp --engine`` takes: ``unix:PATH`` or ``http://HOST:PORT``.
        allowed_hosts: ``Host`` values to accept (TCP), else ``None``.
        path: The socket file (unix), removed on shutdown if it is still ours.
        inode: The socket file's inode when bound.
    """

    sock: socket.socket
    url: str
    allowed_hosts: frozenset[str] | None = None
    path: Path | None = None
    inode: int | None = None

    def close(self) -> None:
        """Close the socket and remove its file if it is still the one bound."""
        self.sock.close()
        if self.path is None:
            return
        with contextlib.suppress(OSError):
            info = os.lstat(self.path)
            if stat.S_ISSOCK(info.st_mode) and info.st_ino == self.inode:
                self.path.unlink()


def _refuse_unless_stale(path: Path) -> None:
    """Remove a stale socket at ``path``; refuse anything else that is there."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise ValueError(f"{path} exists and is not a socket; refusing to replace it")
    if info.st_uid != os.geteuid():
        raise ValueError(f"{path} belongs to another user; refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(2.0)
    try:
        probe.connect(str(path))
    except ConnectionRefusedError:
        path.unlink()  # stale: nobody listens
        return
    except OSError:
        raise ValueError(f"{path} exists and cannot be probed; refusing to replace it") from None
    finally:
        probe.close()
    raise ValueError(f"an engine is already serving on {path}")


def bind_unix(path: str | os.PathLike[str], *, group: str | None = None) -> Listener:
    """Bind a listening unix socket, mode ``0600`` (``0660`` with ``group``).

    The socket file is created under umask ``0177`` and chmod'ed before
    ``listen``, so no other user can ever connect to it. A stale socket (one
    nobody listens on, owned by this user) is replaced; anything else at the path
    is refused.

    Args:
        path: The socket file.
        group: A group whose members may connect too (``0660``); the engine's
            user must belong to it.

    Returns:
        The listener.

    Raises:
        ValueError: If the path is too long, holds something else, or an engine
            already serves there; or ``group`` is unknown.
    """
    where = Path(path).absolute()
    if len(os.fsencode(where)) > _SUN_PATH_MAX:
        raise ValueError(f"socket path too long (at most {_SUN_PATH_MAX} bytes): {where}")
    gid = None
    if group is not None:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            raise ValueError(f"no such group: {group}") from None
    _refuse_unless_stale(where)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old = os.umask(0o177)
        try:
            sock.bind(str(where))
        finally:
            os.umask(old)
        if gid is not None:
            os.chown(where, -1, gid)
        os.chmod(where, 0o660 if gid is not None else 0o600)
        inode = os.lstat(where).st_ino
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    return Listener(sock=sock, url=f"unix:{where}", path=where, inode=inode)


def parse_listen(text: str) -> tuple[str, int]:
    """Parse ``HOST:PORT`` (``[::1]:PORT`` for IPv6) and insist on loopback.

    Args:
        text: The ``--listen`` value.

    Returns:
        ``(ip, port)`` with ``localhost`` read as ``127.0.0.1``.

    Raises:
        ValueError: If it does not parse or the address is not loopback.
    """
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"--listen takes HOST:PORT, not {text!r}")
    host = host.removeprefix("[").removesuffix("]")
    if host == "localhost":
        host = "127.0.0.1"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"--listen needs a loopback IP address, not {host!r}") from None
    if not address.is_loopback:
        raise ValueError(
            f"{host} is not a loopback address: the engine listens only on loopback "
            "(127.0.0.0/8, ::1); prefer --socket"
        )
    return str(address), int(port_text)


def bind_tcp(host: str, port: int) -> Listener:
    """Bind a listening TCP socket on a loopback address (see :func:`parse_listen`).

    Returns:
        The listener; ``url`` names the bound port (useful with port 0).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    hosts = {f"{shown}:{bound}"}
    if host == "127.0.0.1":
        hosts.add(f"localhost:{bound}")
    return Listener(sock=sock, url=f"http://{shown}:{bound}", allowed_hosts=frozenset(hosts))
