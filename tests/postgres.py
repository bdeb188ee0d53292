"""A throwaway PostgreSQL cluster for the tests of the PostgreSQL journal store.

`postgres_cluster` (session-scoped) runs initdb into a fresh directory under
/tmp and starts `postgres` on a unix socket in it (`listen_addresses=''`: no TCP;
the port number only names the socket), trust authentication, user `crw`. As
root (CI, this machine) initdb and postgres run as `nobody` through `runuser`:
postgres refuses to run as root, and the directory is made nobody's. At
teardown it is stopped with `pg_ctl -m immediate` and killed by its pid, and the
directory removed. `postgres_url` gives each test a database of its own.

The binaries are found on PATH or under /usr/lib/postgresql/*/bin (Debian's
`postgresql`; `make postgres` installs it). Without them the tests skip, or fail
with CI set.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deadlines import LOADED

USER = "crw"
_databases = itertools.count(1)


@dataclass(frozen=True)
class Cluster:
    base: Path
    port: int
    bin: Path
    pid: int

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}@/{database}?host={self.base}&port={self.port}"


def find_binaries() -> Path | None:
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl") and shutil.which("postgres"):
        return Path(found).resolve().parent
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True):
        return Path(candidate).parent
    return None


def _as_user(argv: list[str]) -> list[str]:
    """`argv` run as `nobody` when this process is root (postgres refuses root)."""
    return ["runuser", "-u", "nobody", "--", *argv] if os.geteuid() == 0 else argv


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _postmaster_pid(data: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int((data / "postmaster.pid").read_text().split()[0])
    return None


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[Cluster]:
    binaries = find_binaries()
    if binaries is None:
        message = "PostgreSQL's initdb, pg_ctl and postgres are not installed (make postgres)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    with throwaway_cluster(binaries) as cluster:
        yield cluster


@contextlib.contextmanager
def throwaway_cluster(binaries: Path, settings: tuple[str, ...] = ()) -> Iterator[Cluster]:
    """A cluster in a fresh directory under /tmp, started with `settings` (`-c`
    NAME=VALUE each) besides the fixture's, stopped and removed at the end (also
    bench/pg.py's)."""
    base = Path(tempfile.mkdtemp(prefix="crw-pg-", dir="/tmp"))
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.chown(base, nobody.pw_uid, nobody.pw_gid)
    data, port = base / "data", _free_port()
    log = base / "server.log"
    subprocess.run(
        _as_user(
            [
                *(str(binaries / "initdb"), "-D", str(data), "-U", USER, "--auth=trust"),
                *("-E", "UTF8", "--locale=C", "--no-sync"),
            ]
        ),
        check=True,
        cwd=base,  # nobody's: the test's own directory may be closed to it
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    with open(log, "wb") as out:
        server = subprocess.Popen(
            _as_user(
                [
                    *(str(binaries / "postgres"), "-D", str(data), "-k", str(base)),
                    *("-p", str(port), "-c", "listen_addresses=", "-c", "max_connections=200"),
                    *(arg for setting in settings for arg in ("-c", setting)),
                ]
            ),
            cwd=base,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    cluster = Cluster(base, port, binaries, server.pid)
    try:
        _wait_ready(cluster, server, log)
        yield cluster
    finally:
        pid = _postmaster_pid(data)
        subprocess.run(
            _as_user([str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
            cwd=base,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        for victim in (pid, server.pid):
            if victim is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(victim, signal.SIGKILL)
        server.wait()
        shutil.rmtree(base, ignore_errors=True)


def _wait_ready(cluster: Cluster, server: subprocess.Popen[bytes], log: Path) -> None:
    import psycopg

    deadline = time.monotonic() + LOADED
    while True:
        try:
            psycopg.connect(cluster.url(), connect_timeout=5).close()
            return
        except psycopg.OperationalError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"postgres did not start: {log.read_text()}") from None
            time.sleep(0.05)


@pytest.fixture
def postgres_url(postgres_cluster: Cluster) -> str:
    """The URL of a new, empty database of the throwaway cluster, this test's alone."""
    import psycopg

    name = f"t{os.getpid()}_{next(_databases)}"
    with psycopg.connect(postgres_cluster.url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}".encode())
    return postgres_cluster.url(name)
