"""Builds every kernel of a manifest on a server: upload what is missing, submit, wait, download,
and record the result in the lock after each kernel (so an interrupted build resumes)."""

from __future__ import annotations

import asyncio
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.client import APIError, AsyncClient
from app.core.digest import file_digest
from app.farm.lock import fingerprint, read_lock, render, write_lock
from app.farm.manifest import Kernel
from app.farm.progress import Reporter


@dataclass
class Outcome:
    name: str
    status: str  # "up to date", "built", "failed"
    entry: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def lock_would_change(kernels: list[Kernel], lock_path: Path) -> list[str]:
    """Names of kernels whose lock entry would change (added, removed or different inputs)."""
    lock = read_lock(lock_path)
    names = {k.name for k in kernels}
    changed = [
        k.name for k in kernels if lock.get(k.name, {}).get("inputs") != fingerprint(k.inputs)
    ]
    return sorted(changed + [n for n in lock if n not in names])


def _toolchain(path: Path) -> dict[str, Any]:
    with zipfile.ZipFile(path) as zf:
        if "kit.json" in zf.namelist():  # a model kit: its schema version and format
            kit = json.loads(zf.read("kit.json"))
            return {"kit_version": kit.get("kit_version"), "format": kit.get("format")}
        info = json.loads(zf.read("kernel.json"))
    out = {"generator": info.get("generator"), "coremltools": info.get("coremltools_version")}
    if info.get("compiler"):  # .mlmodelc zips: the backend and its toolchain versions
        out["compiler"] = info["compiler"]
    if info.get("aimodelc"):  # .aimodel compiled for devices: coreai-build's versions
        out["coreai_build"] = info["aimodelc"]["toolchain"]
    return out


def _up_to_date(kernel: Kernel, entry: dict[str, Any] | None, path: Path) -> bool:
    if not entry:
        return False
    return (
        entry.get("inputs") == fingerprint(kernel.inputs)
        and path.is_file()
        and (file_digest(path) == entry.get("artifact"))
    )


async def build(
    kernels: list[Kernel],
    client: AsyncClient,
    out_dir: Path,
    lock_path: Path,
    *,
    concurrency: int = 4,
    reporter: Reporter,
) -> list[Outcome]:
    out_dir.mkdir(parents=True, exist_ok=True)
    previous = read_lock(lock_path)
    names = {k.name for k in kernels}
    # The lock is rewritten as kernels finish: start from what still matches the manifest.
    entries = {n: e for n, e in previous.items() if n in names}
    gate, lock_mutex = asyncio.Semaphore(concurrency), asyncio.Lock()

    async def record(name: str, entry: dict[str, Any] | None) -> None:
        async with lock_mutex:
            if entry is None:
                entries.pop(name, None)
            else:
                entries[name] = entry
            write_lock(lock_path, entries)

    async def one(kernel: Kernel) -> Outcome:
        path = out_dir / kernel.filename
        reporter.update(kernel.name, "checking")
        if _up_to_date(kernel, previous.get(kernel.name), path):
            reporter.update(kernel.name, "done")
            return Outcome(kernel.name, "up to date", previous[kernel.name])
        async with gate:
            try:
                reporter.update(kernel.name, "uploading")
                if kernel.model is not None or kernel.onnx is not None:
                    if kernel.onnx is not None:
                        await client.compile_onnx(
                            kernel.onnx,
                            **kernel.onnx_options,
                            passes=kernel.passes,
                            quantize=kernel.quantize,
                            format=kernel.format,
                            target=kernel.target,
                            name=kernel.name,
                            save_to=path,
                        )
                    elif kernel.model is not None:
                        await client.compile_model(
                            kernel.model, save_to=path, format=kernel.format, **kernel.kit_options
                        )
                    entry = {
                        "inputs": fingerprint(kernel.inputs),
                        **kernel.inputs,
                        "request_key": kernel.request_key,
                        "artifact": file_digest(path),
                        "file": kernel.filename,
                        "toolchain": _toolchain(path),
                    }
                    await record(kernel.name, entry)
                    reporter.update(kernel.name, "done")
                    return Outcome(kernel.name, "built", entry)
                if kernel.graph is not None:
                    job = await client.submit_graph(
                        kernel.graph,
                        kernel.weights,
                        format=kernel.format,
                        target=kernel.target,
                        name=kernel.name,
                        architectures=kernel.architectures,
                    )
                else:
                    # an op entry: not a graph, not a model kit (they have no target)
                    assert kernel.op is not None and kernel.target is not None
                    job = await client.submit(
                        kernel.op,
                        kernel.params,
                        kernel.weights,
                        quantize=kernel.quantize,
                        format=kernel.format,
                        target=kernel.target,
                        name=kernel.name,
                        architectures=kernel.architectures,
                    )
                await job.wait(
                    progress=lambda j: reporter.update(kernel.name, j.get("state", "queued"))
                )
                if job.state != "succeeded":
                    raise RuntimeError(
                        f"job {job.id} {job.state}: {job.data.get('error') or ''}".strip()
                    )
                reporter.update(kernel.name, "downloading")
                await job.download(path)
            except (APIError, RuntimeError, TimeoutError, ValueError) as exc:
                reporter.update(kernel.name, "failed")
                await record(kernel.name, None)
                return Outcome(kernel.name, "failed", error=str(exc))
        entry = {
            "inputs": fingerprint(kernel.inputs),
            **kernel.inputs,
            "request_key": job.id,
            "artifact": file_digest(path),
            "file": kernel.filename,
            "toolchain": _toolchain(path),
        }
        await record(kernel.name, entry)
        reporter.update(kernel.name, "done")
        return Outcome(kernel.name, "built", entry)

    outcomes = await asyncio.gather(*(one(k) for k in kernels))
    if not lock_path.exists() or lock_path.read_text() != render(entries):
        write_lock(lock_path, entries)  # drops kernels no longer in the manifest
    return list(outcomes)
