"""Shared fixtures. Keep each fixture small and documented; HTTP fixtures run a real server."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def uvicorn_server(
    data_dir: Path,
    launcher: Sequence[str] = ("-m", "uvicorn"),
    *,
    own_group: bool = False,
    **env: str,
) -> Iterator[str]:
    """`uvicorn app.main:app` as a real subprocess on a free loopback port, with ANE_* settings
    from `env` (e.g. max_json_bytes="4096") and its data under `data_dir`; yields the base URL.
    `launcher`: what python runs with uvicorn's options (a script that wraps uvicorn's CLI).
    `own_group`: the server leads a process group of its own (with its build workers), for
    tests that signal the whole group."""
    port = free_port()
    environ = {
        **os.environ,
        "ANE_DATA_DIR": str(data_dir),
        **{f"ANE_{k.upper()}": v for k, v in env.items()},
    }
    log = open(data_dir.parent / f"uvicorn-{port}.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            sys.executable,
            *launcher,
            "app.main:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-access-log",
        ],
        cwd=REPO,
        env=environ,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=own_group,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"uvicorn exited with {proc.returncode}; see {log.name}")
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not answer /healthz; see {log.name}")
            time.sleep(0.1)
        yield base
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


# Limits of the shared test server: small enough that oversize requests are cheap to send.
SERVER_LIMITS = {
    "max_json_bytes": str(256 * 1024),
    "max_weight_bytes": str(4 << 20),
    "max_body_bytes": str(6 << 20),
    "max_artifact_bytes": str(16 << 20),
    "max_program_weight_bytes": str(8 << 20),  # a budget small graphs can cross (split tests)
}


@dataclass(frozen=True)
class LiveServer:
    url: str
    data_dir: Path


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> Iterator[LiveServer]:
    """One live service for the HTTP tests (no API keys), with the limits in SERVER_LIMITS."""
    data_dir = tmp_path_factory.mktemp("server") / "data"
    with uvicorn_server(data_dir, **SERVER_LIMITS) as base:
        yield LiveServer(base, data_dir)


@pytest.fixture
def client(server) -> Iterator[httpx.Client]:
    """An httpx client bound to the shared live server."""
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c
