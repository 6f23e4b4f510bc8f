"""Running a tool as an asyncio subprocess with a deadline, and never leaving it behind.

fork+exec (not a bare fork) is what keeps this safe on macOS, where a forked Python that has
touched CoreFoundation crashes. The child gets its own process group so a timeout or a cancelled
job kills the tool and anything it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str
    stderr: str


class TimedOut(Exception):
    def __init__(self, stdout: str = "", stderr: str = ""):
        self.stdout, self.stderr = stdout, stderr
        super().__init__("timed out")


async def run(argv: list[str], timeout_s: float, cwd: str | None = None) -> Finished:
    """Run `argv`; raise TimedOut after `timeout_s`, FileNotFoundError if the tool is missing."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        await _kill(proc)
        raise TimedOut() from None
    except BaseException:  # cancelled job: the tool must not outlive it
        await _kill(proc)
        raise
    assert proc.returncode is not None
    return Finished(proc.returncode, _text(out), _text(err))


async def run_relative(
    make_argv: Callable[[Path, Path], list[str]], src: Path, outdir: Path, timeout_s: float
) -> tuple[list[str], Finished]:
    """Run a compiler on `src` into `outdir`, both named relative to their common directory:
    temporary paths stay out of its log, so the same input compiled twice gives the same zip."""
    cwd = os.path.commonpath([src.absolute(), outdir.absolute()])
    argv = make_argv(Path(os.path.relpath(src, cwd)), Path(os.path.relpath(outdir, cwd)))
    return argv, await run(argv, timeout_s, cwd=cwd)


async def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        await asyncio.shield(proc.wait())


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", "replace")


async def version_of(argv: list[str], timeout_s: float = 20.0) -> str | None:
    """A tool's one-line version, or None when the tool is absent or fails."""
    try:
        done = await run(argv, timeout_s)
    except (OSError, TimedOut):
        return None
    text = (done.stdout or done.stderr).strip()
    if done.returncode != 0 or not text:
        return None
    return " ".join(text.split())  # `xcodebuild -version` prints two lines
