"""Real Postgres and Redis servers for tests: started in a temporary directory on a free port, torn down after.

Postgres comes from Debian's ``postgresql`` package (``initdb`` + ``pg_ctl``; as root they run as the ``postgres``
user, which refuses to start as root). Where a binary is missing, ``POSTGRES_MISSING`` / ``REDIS_MISSING`` say so and
the tests that need it skip with that reason.
"""

from __future__ import annotations

import glob
import os
import pwd
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_RNG = random.SystemRandom()  # a test seeding `random` must not make two workers pick the same ports


def free_port() -> int:
    """A port free now, below the kernel's ephemeral range: a port the kernel hands out (bind to 0) can be handed
    to any outgoing connection between this call and the server's bind; these are only ever taken by choice."""
    low, high = _ephemeral_range()
    for _ in range(200):
        port = _RNG.randrange(10_000, low) if low > 11_000 else _RNG.randrange(high + 1, 65_536)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port found below the ephemeral range in 200 tries")


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def _pg_bindir() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(versions[-1]).parent if versions else None


PG_BINDIR = _pg_bindir()
POSTGRES_MISSING = (
    None if PG_BINDIR else "Postgres is not installed (Debian package postgresql; `make setup` installs it as root)"
)
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_MISSING = (
    None if Path(REDIS_SERVER).exists() else "redis-server is not installed (Debian package redis-server)"
)


def _as_postgres() -> dict[str, object]:
    """Run as the ``postgres`` user when we are root (Postgres refuses root)."""
    if os.geteuid() != 0:
        return {}
    pw = pwd.getpwnam("postgres")
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}


def reachable_by_postgres(workdir: Path) -> None:
    """Let the postgres user reach ``workdir`` through the tmp tree. Called before every start: each pytest session
    sets /tmp/pytest-of-<user> back to 0700, so another session started meanwhile (two runs on one machine) cuts a
    cluster off from its own files."""
    if not _as_postgres():
        return
    for parent in workdir.parents:
        if str(parent).startswith(("/tmp", "/var/tmp")) and parent != Path("/tmp"):
            os.chmod(parent, os.stat(parent).st_mode | 0o011)


def _run(args: list[str], creds: dict, log: Path | None = None) -> None:
    """Run a Postgres tool; a failure says what the tool printed (and the server's log), not only its exit code."""
    done = subprocess.run(args, capture_output=True, text=True, **creds)
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:] if log is not None and log.exists() else ""
        raise RuntimeError(f"{Path(args[0]).name} exited {done.returncode}: {done.stderr.strip()[-2000:]}"
                           f"{chr(10) + 'server log: ' + tail if tail else ''}")


def _private_dir(workdir: Path) -> Path:
    """The directory the cluster lives in: ``workdir`` itself, or as root a directory of its own under /tmp that
    ``workdir`` links to. Every pytest session sets /tmp/pytest-of-<user> back to 0700 when it first makes a temp
    dir; under pytest-xdist each worker is a session, so one worker cut another's cluster off from its own files
    (initdb: "Permission denied"). Callers that hand paths to Postgres's tools resolve them (``Path.resolve``)."""
    if not _as_postgres():
        workdir.mkdir(parents=True, exist_ok=True)
        return workdir
    if workdir.is_symlink():
        return workdir.resolve()
    real = Path(tempfile.mkdtemp(prefix="cw-pg-", dir="/tmp"))
    os.chmod(real, 0o755)
    workdir.parent.mkdir(parents=True, exist_ok=True)
    workdir.symlink_to(real, target_is_directory=True)
    return real


@contextmanager
def postgres_server(workdir: Path) -> Iterator[str]:
    """A fresh Postgres cluster; yields its URL ``postgresql://postgres@127.0.0.1:PORT/postgres``."""
    if PG_BINDIR is None:
        raise RuntimeError(POSTGRES_MISSING)
    given, workdir = workdir, _private_dir(workdir)
    try:
        data = workdir / "pgdata"
        sockdir = workdir / "pgsock"
        sockdir.mkdir(exist_ok=True)
        creds = _as_postgres()
        if creds:
            pw = pwd.getpwnam("postgres")
            for p in (workdir, sockdir):
                os.chown(p, pw.pw_uid, pw.pw_gid)
            reachable_by_postgres(workdir)
        _run([str(PG_BINDIR / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
              "--no-sync"], creds)
        port = free_port()
        log = workdir / "postgres.log"
        opts = f"-p {port} -k {sockdir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        reachable_by_postgres(workdir)
        _run([str(PG_BINDIR / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", opts, "-w", "-t", "60", "start"],
             creds, log)
        try:
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            subprocess.run(
                [str(PG_BINDIR / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                capture_output=True, **creds,  # type: ignore[arg-type]
            )
    finally:
        if workdir != given:  # the directory of its own under /tmp (``_private_dir``)
            shutil.rmtree(workdir, ignore_errors=True)


@contextmanager
def redis_server(workdir: Path, port: int | None = None, password: str | None = None) -> Iterator[str]:
    """A fresh redis-server without persistence (on ``port``, or a free one); yields ``redis://127.0.0.1:PORT/0``
    (with ``password``: it requires it, and the URL holds it). Started again on the same port, it stands for a
    Redis that went away and came back."""
    import redis

    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    proc = subprocess.Popen(
        [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(workdir), *(("--requirepass", password) if password else ())],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"redis://{f':{password}@' if password else ''}127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("redis-server did not start") from None
            time.sleep(0.05)
    try:
        yield url
    finally:
        client.close()
        proc.terminate()
        proc.wait(10)


def _available(proc: subprocess.Popen) -> str:
    """What a finished process wrote to its piped stdout, without waiting (a child it left may hold the pipe)."""
    if proc.stdout is None or proc.stdout.closed:
        return ""
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    try:
        data = os.read(fd, 1 << 20)
    except (BlockingIOError, OSError):
        return ""
    return data.decode(errors="replace")[-3000:]


def wait_serving(url: str, proc: subprocess.Popen, seconds: float, what: str) -> None:
    """Wait until ``url`` answers 200, while ``proc`` (the server) lives; fails naming ``what`` otherwise."""
    import httpx

    deadline = time.monotonic() + seconds
    while True:
        if proc.poll() is not None:  # its own words say why (a CI-like run once saw exit code 3 and nothing else)
            said = _available(proc)
            raise AssertionError(f"{what} stopped (exit code {proc.returncode}) before it served:\n{said}")
        assert time.monotonic() < deadline, f"{what} never served within {seconds} s"
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.5)
