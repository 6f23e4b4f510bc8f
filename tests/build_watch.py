"""A watch on the build steps of one process: a profiler hook, on every thread, that writes a
line to a log each time one of them is entered in this process.

    python tests/build_watch.py app.main:app --port ...   # uvicorn, watched (BUILD_WATCH_LOG)

The API process must never run a build itself: builds run in its pool's worker processes, which
this hook is not in (they start from this file but only as an import, never as `__main__`).
A build reached through `asyncio.to_thread`, an executor, or called on the loop is written down.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import CodeType

REPO = Path(__file__).resolve().parent.parent


def build_steps() -> dict[CodeType, str]:
    """The functions every build, compile and compiled zip goes through, by code object."""
    from app import artifacts
    from app.compile import kernel, placement
    from app.mlmodelc import compile_package

    steps = (
        artifacts.prepare,
        artifacts.write,
        compile_package,
        placement.placement_report,
        kernel._write_zip,
    )
    return {f.__code__: f"{f.__module__}.{f.__qualname__}" for f in steps}


@contextlib.contextmanager
def watching(log: Path) -> Iterator[None]:
    """Write `<step>\\t<thread>` to `log` whenever a build step starts in this process, on any
    thread (those started later too) while the context lasts. The first line names the steps."""
    steps = build_steps()
    lock = threading.Lock()
    with open(log, "a", buffering=1) as out:
        out.write("watching " + " ".join(sorted(steps.values())) + "\n")

        def hook(frame, event, arg):
            if event == "call" and (step := steps.get(frame.f_code)) is not None:
                with lock:
                    out.write(f"{step}\t{threading.current_thread().name}\n")

        threading.setprofile(hook)
        sys.setprofile(hook)
        try:
            yield
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]


def main() -> None:
    sys.path.insert(0, str(REPO))  # the code under test, whatever the venv installed
    from uvicorn.main import main as uvicorn

    with watching(Path(os.environ["BUILD_WATCH_LOG"])):
        uvicorn()  # reads its options from sys.argv


if __name__ == "__main__":
    main()
