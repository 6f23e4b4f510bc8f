"""Per-kernel stage display for manifest builds: live bars on a terminal, one line per change in
a log (CI), nothing with --json (the summary is printed at the end instead)."""

from __future__ import annotations

import sys
from typing import TextIO

STAGES = ["checking", "uploading", "queued", "generating", "compiling", "downloading", "done"]


class Reporter:
    def __init__(self, names: list[str], *, mode: str = "auto", stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "live" if self.stream.isatty() else "lines"
        self.mode, self.last = mode, dict.fromkeys(names, "")
        self._progress = None
        if mode == "live":
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn

            self._progress = Progress(
                TextColumn("{task.fields[kernel]:<24}"),
                BarColumn(),
                TextColumn("{task.fields[stage]}"),
                console=Console(file=self.stream),
            )
            self._tasks = {
                n: self._progress.add_task("", total=len(STAGES) - 1, kernel=n, stage="waiting")
                for n in names
            }
            self._progress.start()

    def update(self, name: str, stage: str) -> None:
        if self.last.get(name) == stage:
            return
        self.last[name] = stage
        if self.mode == "lines":
            print(f"{name}: {stage}", file=self.stream, flush=True)
        elif self._progress is not None:
            done = STAGES.index(stage) if stage in STAGES else len(STAGES) - 1
            self._progress.update(self._tasks[name], completed=done, stage=stage)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
