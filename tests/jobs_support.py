"""Helpers for the job tests: a private redis-server, real `ane-kernels worker` processes, the
stand-in xcrun's compile log, and engines over a data directory."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import redis

REPO = Path(__file__).resolve().parent.parent
FAKE_XCRUN = Path(__file__).parent / "fake_xcrun"
WORKER_BIN = Path(sys.executable).parent / "ane-kernels"
# `ane-kernels` from this checkout (run from REPO): the installed script imports the package
# wherever it was installed from, which need not be the code under test.
CLI = [sys.executable, "-m", "app.cli"]

# Short lease, fast polls: a dead worker's job moves on in about a second and a half.
FAST = {
    "ANE_JOB_LEASE_S": "1.5",
    "ANE_WORKER_POLL_S": "0.05",
    "ANE_WORKER_HEARTBEAT_S": "0.5",
    "ANE_JOB_RETRY_BACKOFF_S": "0.2",
    "ANE_JOB_MAX_TRIES": "3",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def eventually(check: Callable[[], object], timeout: float = 30, what: str = "condition"):
    """Poll `check` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@contextlib.contextmanager
def redis_server(workdir: Path) -> Iterator[str]:
    """A redis-server of our own on a free port (never the shared 6379); yields its URL."""
    port = free_port()
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url)

        def up() -> bool:
            try:
                return bool(client.ping())
            except redis.ConnectionError:
                return False

        eventually(up, 10, "redis-server")
        client.close()
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


class WorkerProcess:
    """`ane-kernels worker --queue Q` as a real process in its own process group."""

    def __init__(self, queue: str, env: dict[str, str], log_path: Path):
        self.queue = queue
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [*CLI, "worker", "--queue", queue],
            cwd=REPO,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, url: str) -> None:
        """Ready once its heartbeat is in Redis."""
        client = redis.Redis.from_url(url)
        try:

            def ready() -> bool:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"worker exited; see {self.log_path}")
                return any(k.decode().endswith(f":{self.pid}") for k in client.keys("ane:worker:*"))

            eventually(ready, 60, f"worker {self.queue} heartbeat")
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL, no cleanup: what a machine dying looks like to the farm."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._log.close()

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM, as an operator stops a worker; one that does not end within `timeout` is
        asked for its threads' stacks (SIGUSR1), killed, and the failure shows its log's end."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGUSR1)
                time.sleep(2)
                self.kill()
                tail = self.log_path.read_text(errors="replace")[-6000:]
                raise AssertionError(
                    f"the worker did not stop within {timeout} s:\n{tail}"
                ) from None
        self._log.close()


def worker_env(url: str, data_dir: Path, xcrun_log: Path, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "PATH": f"{FAKE_XCRUN}{os.pathsep}{os.environ['PATH']}",
        "ANE_REDIS_URL": url,
        "ANE_DATA_DIR": str(data_dir),
        "FAKE_XCRUN_LOG": str(xcrun_log),
        **FAST,
    }
    for var in ("FAKE_XCRUN_SLEEP", "FAKE_XCRUN_FAIL", "FAKE_XCRUN_CRASH", "ANE_COMPILER"):
        env.pop(var, None)
    env.update(extra)
    return env


def xcrun_events(log: Path, model: str | None = None, event: str | None = None) -> list[dict]:
    """The stand-in xcrun's own record of what it was asked to compile."""
    if not log.exists():
        return []
    entries = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [
        e
        for e in entries
        if (model is None or e.get("model") == model) and (event is None or e["event"] == event)
    ]


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie (exited, not yet reaped by its parent) counts as gone
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    return False


@contextlib.contextmanager
def environ(**values: str) -> Iterator[None]:
    """os.environ with `values` set, for servers started inside the block (they copy it)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
