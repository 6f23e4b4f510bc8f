"""Helpers for the fault tests: a redis-server that can be killed and started again on the same
port (with or without its append-only file), the service's JSON access log, small filesystems."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import redis
from jobs_support import eventually, free_port


class RedisProcess:
    """A private redis-server on a fixed free port. `persistent`: an append-only file in
    `workdir`, fsynced on every write, so a restart finds what the killed server had."""

    def __init__(self, workdir: Path, *, persistent: bool):
        self.workdir, self.persistent = workdir, persistent
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        aof = (
            ["--appendonly", "yes", "--appendfsync", "always"]
            if self.persistent
            else ["--appendonly", "no"]
        )
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--dir",
                str(self.workdir),
                *aof,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        eventually(self.answers, 15, "redis-server to answer")

    def answers(self) -> bool:
        client = redis.Redis.from_url(self.url, socket_timeout=1)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=5)

    def kill(self) -> None:
        """SIGKILL: no shutdown save, no goodbye to clients, as a crash or an OOM kill."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


@contextlib.contextmanager
def redis_process(workdir: Path, *, persistent: bool) -> Iterator[RedisProcess]:
    server = RedisProcess(workdir, persistent=persistent)
    try:
        yield server
    finally:
        server.stop()


def log_path(data_dir: Path, base_url: str) -> Path:
    """Where conftest.uvicorn_server writes the server's output (its JSON logs)."""
    return data_dir.parent / f"uvicorn-{urlsplit(base_url).port}.log"


def json_lines(path: Path) -> list[dict]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            doc = json.loads(line)
            if isinstance(doc, dict):
                out.append(doc)
    return out


def access_log(path: Path) -> list[dict]:
    """The service's access log lines (logger ane.access): method, path, status, ..."""
    return [d for d in json_lines(path) if d.get("logger") == "ane.access"]


@contextlib.contextmanager
def small_filesystem(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (e.g. "6m") mounted at `path`: a real filesystem that fills up. Skips
    the test, saying why, where mounting is not permitted (it needs root). Mount it at the data
    directory itself: a test server logs beside it, and the log must survive the unmount."""
    import os

    import pytest

    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root; this test runs as a user")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def remount(path: Path, mode: str) -> None:
    """`mode` "ro" or "rw": the mounted filesystem at `path` turned read-only, or back."""
    subprocess.run(["mount", "-o", f"remount,{mode}", str(path)], check=True)


def fill(path: Path, leave: int) -> Path:
    """A ballast file at `path` taking the filesystem's free space down to about `leave`
    bytes (rounded to its blocks)."""
    import os

    st = os.statvfs(path.parent)
    size = max(st.f_bavail * st.f_frsize - leave, 0)
    with open(path, "wb") as f:
        chunk = bytes(1 << 20)
        while size > 0:
            f.write(chunk[: min(size, len(chunk))])
            size -= len(chunk)
    return path


def leftovers(data_dir: Path) -> list[Path]:
    """Temporary files (uploads being spooled, artifacts or sidecars being written, job
    scratch) anywhere under the data directory: none may outlive a failed request."""
    found = []
    for sub in ("blobs/tmp", "artifacts/tmp", "work"):
        root = data_dir / sub
        if root.exists():
            found += [p for p in root.rglob("*") if p.is_file()]
    return found


def unaccounted_bytes(data_dir: Path) -> int:
    """Bytes the filesystem at `data_dir` has in use beyond the files it lists: space held by
    files deleted while still open or mapped somewhere (a leak that fills a disk unseen)."""
    import os

    st = os.statvfs(data_dir)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    listed = sum(os.stat(p).st_blocks * 512 for p in data_dir.rglob("*") if p.is_file())
    return used - listed
