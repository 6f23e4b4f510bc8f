"""Shared fixtures. Keep each fixture small and documented; HTTP fixtures run a real server.

How a test gets a live server (every one a real uvicorn on a free loopback port; the suite runs
under pytest-xdist, so nothing here is shared between worker processes and nothing uses a fixed
port or path):

- `server` / `client`: the shared service of one worker process (session scope, so one per
  xdist worker), with the small limits of SERVER_LIMITS and its data under a temp folder. For
  tests that only send requests; a test must not depend on what another left in it (use a
  fresh name, digest or body of its own).
- `uvicorn_server(data_dir, **settings)`: a service of the test's own, with ANE_* settings of
  its choosing (a context manager; use it in a fixture of module scope when several tests share
  it).
- `make_run_server(checkout_copy(tmp))`: the service as `make run` starts it: `make run` itself
  in a copy of the checkout, every ANE_* setting unset, the relative data dir `data` (under the
  copy). For what a user meets with the defaults.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
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


def hide_packages(monkeypatch: pytest.MonkeyPatch, **distributions: str) -> None:
    """Processes this test starts behave as if these optional packages (module=distribution)
    were not installed: tests/without_packages/sitecustomize.py, put first on PYTHONPATH."""
    hidden = str(REPO / "tests" / "without_packages")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [hidden, os.environ.get("PYTHONPATH")]))
    )
    monkeypatch.setenv("HIDDEN_PACKAGES", ",".join(f"{m}={d}" for m, d in distributions.items()))


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
        _wait_healthy(proc, base, Path(log.name))
        yield base
    finally:
        _stop(proc, group=False)
        log.close()


def _stop(proc: subprocess.Popen, group: bool) -> None:
    """SIGINT (uvicorn's graceful stop, as Ctrl-C), to the process group when it leads one."""
    if group:
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        if group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
        proc.wait()


def _wait_healthy(proc: subprocess.Popen, base: str, log: Path) -> None:
    # One client for the whole wait: each new httpx client loads the CA bundle (~30 ms of CPU),
    # and a poll every 0.1 s while the server imports took CPU from the server it waited for.
    deadline = time.monotonic() + 60
    with httpx.Client(timeout=1) as poller:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited with {proc.returncode}; see {log}")
            try:
                if poller.get(f"{base}/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server did not answer /healthz; see {log}")
            time.sleep(0.1)


# What a clone does not have: the virtualenv, the data dir, git's and the tools' caches.
_NOT_IN_A_CLONE = shutil.ignore_patterns(
    ".venv",
    ".git",
    "data",
    "out",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
    ".import_linter_cache",
    "*.egg-info",
)


def checkout_copy(dest: Path) -> Path:
    """A copy of the checkout at `dest`, as a user's clone has it, with `.venv` linked to the
    suite's virtualenv (so `make run` finds it made and the copy's `app` is what runs: uvicorn
    imports from its working directory first)."""
    shutil.copytree(REPO, dest, ignore=_NOT_IN_A_CLONE)
    (dest / ".venv").symlink_to(sys.prefix)
    return dest


@dataclass(frozen=True)
class MadeRun:
    url: str
    checkout: Path
    log: Path

    @property
    def data_dir(self) -> Path:
        return self.checkout / "data"  # the default ANE_DATA_DIR, relative to `make run`'s folder


@contextmanager
def make_run_server(checkout: Path) -> Iterator[MadeRun]:
    """`make run` in `checkout` (see `checkout_copy`) on a free port, with every ANE_* setting of
    this process unset; yields its URL, folder and log. `-o .venv/bin/activate`: the linked
    virtualenv is taken as made, never rebuilt from the copy."""
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ANE_")}
    log = checkout.parent / f"make-run-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["make", "--no-print-directory", "-o", ".venv/bin/activate", "run", f"PORT={port}"],
            cwd=checkout,
            env=environ,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # make and the server it starts, stopped as one group
        )
        try:
            base = f"http://127.0.0.1:{port}"
            _wait_healthy(proc, base, log)
            yield MadeRun(base, checkout, log)
        finally:
            _stop(proc, group=True)


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


# One TLS context for the per-test clients (httpx loads the CA bundle for each new client, ~30 ms
# of CPU; the suite's servers speak plain HTTP on loopback and never use it).
_TLS = ssl.create_default_context()


@pytest.fixture
def tmpdir_env(tmp_path, monkeypatch) -> Path:
    """A $TMPDIR of the test's own, for this process and the servers it starts, so that what a
    run leaves there shows."""
    path = tmp_path / "tmpdir"
    path.mkdir()
    monkeypatch.setenv("TMPDIR", str(path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # tempfile reads $TMPDIR again
    return path


@pytest.fixture
def client(server) -> Iterator[httpx.Client]:
    """An httpx client bound to the shared live server."""
    with httpx.Client(base_url=server.url, timeout=60, verify=_TLS) as c:
        yield c
