"""Helpers for the hostile-input tests: one live server per module, its resident memory read from
/proc, and a check that a refused request leaves nothing behind in the data directory."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from conftest import uvicorn_server

MiB = 1 << 20
RSS_GROWTH_LIMIT = 64 * MiB


def server_pid(port: int) -> int:
    """The uvicorn child of this process listening on `port` (read from /proc)."""
    me = str(os.getpid())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:"))
        if ppid == me and b"uvicorn" in argv and str(port).encode() in argv:
            return int(entry.name)
    raise LookupError(f"no uvicorn child listening on {port}")


def rss_bytes(pid: int, field: str = "VmRSS") -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith(f"{field}:"))
    return int(line.split()[1]) * 1024


def peak_rss_bytes(pid: int) -> int:
    """The most resident memory the process has had (VmHWM): what a passing spike cost."""
    return rss_bytes(pid, "VmHWM")


def data_files(data_dir: Path) -> set[Path]:
    return {p for p in data_dir.rglob("*") if p.is_file()}


@dataclass
class HostileServer:
    url: str
    data_dir: Path
    pid: int
    client: httpx.Client

    def alive(self) -> None:
        assert self.client.get("/healthz").status_code == 200

    @contextmanager
    def leaves_nothing(self) -> Iterator[None]:
        """The requests inside leave no file behind: neither stored nor half-written."""
        before = data_files(self.data_dir)
        yield
        after = data_files(self.data_dir)
        assert after <= before, sorted(map(str, after - before))


@contextmanager
def hostile_server(data_dir: Path, **env: str) -> Iterator[HostileServer]:
    """A live server for one module; on leaving, it must still answer, its RSS must have grown by
    less than RSS_GROWTH_LIMIT over the module, and no temporary file may be left."""
    with uvicorn_server(data_dir, **env) as base:
        pid = server_pid(int(base.rsplit(":", 1)[1]))
        with httpx.Client(base_url=base, timeout=120) as client:
            server = HostileServer(base, data_dir, pid, client)
            server.alive()
            start = rss_bytes(pid)
            yield server
            server.alive()
            grown = rss_bytes(pid) - start
            assert grown < RSS_GROWTH_LIMIT, f"the server's RSS grew by {grown / MiB:.1f} MiB"
            left = [p for p in data_files(data_dir) if p.parent.name == "tmp"]
            assert not left, left
