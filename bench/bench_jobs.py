"""Job engine benchmarks, measured side by side in one run (ratios, not absolute times).

    .venv/bin/python -m bench.bench_jobs [--jobs 30] [--latency-jobs 8]

Generation jobs only (format mil: build + package, no compiler), conv 256×256 S=64 with its
weight uploaded to the blob store beforehand, every job a distinct request (no cache hits):

1. Throughput: N jobs submitted at once, until all succeeded; in-process direct path (the same
   build + package in a loop), the embedded engine, arq with 1 and with 2 `ane-kernels worker
   --queue ane-linux` processes. Scaling = 2-worker / 1-worker throughput.
2. Latency of one job at a time (submit -> succeeded, polled every 5 ms) against the direct
   path: what each engine adds on top of the work itself.

Starts its own redis-server on a free port and its own worker processes.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import redis

REPO = Path(__file__).resolve().parent.parent
CHANNELS = 1024
POLL = 0.005


def _keys(client: redis.Redis, pattern: str) -> list[bytes]:
    """A sync client's keys (redis' stubs type each call for the async client as well)."""
    keys = client.keys(pattern)
    assert isinstance(keys, list)
    return keys


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _params() -> dict:
    return {"in_channels": CHANNELS, "out_channels": CHANNELS, "spatial": 64}


def _upload(blobs, seed: int):
    """A weight as an upload would arrive: a .npy file published into the blob store."""
    from app.request import WeightRef
    from app.tensors.headers import sniff

    w = np.random.default_rng(seed).standard_normal((CHANNELS, CHANNELS)).astype(np.float32)
    spool = blobs.new_spool_path()
    with open(spool, "wb") as f:
        np.save(f, w, allow_pickle=False)
    tensor = blobs.put(sniff(spool, "weights.weight"))
    return WeightRef(tensor.digest, "float32", (CHANNELS, CHANNELS))


class Specs:
    """Distinct generation requests (the model name differs, so the key does) over one weight
    uploaded once, as a farm sees many kernels built from the same uploaded checkpoint."""

    def __init__(self, blobs):
        from app.request import KernelRequest

        self.count = 0
        ref = _upload(blobs, 0)
        self.base = KernelRequest.create("conv", _params(), format="mil").with_weights(
            {"weight": ref}
        )

    def take(self, n: int):
        out = []
        for _ in range(n):
            self.count += 1
            out.append(dataclasses.replace(self.base, name=f"bench{self.count}"))
        return out


def direct(specs, blobs, scratch: Path) -> list[float]:
    """The work itself, no queue: resolve weights, build, package to a file."""
    from app import artifacts

    times = []
    for request in specs:
        start = time.perf_counter()
        prepared = artifacts.prepare(blobs.locate(request))
        with open(scratch / "direct.zip", "wb") as f:
            artifacts.write(prepared, f)
        times.append(time.perf_counter() - start)
    return times


async def _latencies(engine, specs) -> list[float]:
    times = []
    for spec in specs:
        start = time.perf_counter()
        job = await engine.submit(spec)
        job = await engine.wait(job.id, 120, poll=POLL)
        assert job.state == "succeeded", job.error
        times.append(time.perf_counter() - start)
    return times


async def _throughput(engine, specs) -> float:
    start = time.perf_counter()
    jobs = [await engine.submit(s) for s in specs]
    done = await asyncio.gather(*(engine.wait(j.id, 300, poll=0.02) for j in jobs))
    elapsed = time.perf_counter() - start
    assert all(j.state == "succeeded" for j in done), [
        j.error for j in done if j.state != "succeeded"
    ]
    return len(specs) / elapsed


class Farm:
    def __init__(self, root: Path, data_dir: Path):
        self.root, self.data_dir = root, data_dir
        port = _free_port()
        self.url = f"redis://127.0.0.1:{port}/0"
        self.redis = subprocess.Popen(
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
                str(root),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.workers: list[subprocess.Popen] = []
        import redis

        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        client.close()

    def add_worker(self, poll: float) -> None:
        import redis

        env = {
            **os.environ,
            "ANE_REDIS_URL": self.url,
            "ANE_DATA_DIR": str(self.data_dir),
            "ANE_WORKER_POLL_S": str(poll),
        }
        log = open(self.root / f"worker{len(self.workers)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "ane-kernels"), "worker", "--queue", "ane-linux"],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.workers.append(proc)
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 60
        while not any(k.decode().endswith(f":{proc.pid}") for k in _keys(client, "ane:worker:*")):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start; see {log.name}")
            time.sleep(0.05)
        client.close()

    def close(self) -> None:
        for proc in self.workers:
            proc.send_signal(signal.SIGTERM)
        for proc in self.workers:
            proc.wait(timeout=30)
        self.redis.terminate()
        self.redis.wait(timeout=10)


async def _engines(args, root: Path) -> dict:
    from app.jobs.select import make_engine
    from app.service.pool import BuildPool
    from app.settings import Settings
    from app.storage import artifact_store, blob_store

    data_dir = root / "data"
    settings = Settings(data_dir=data_dir)
    cache, blobs = artifact_store(settings), blob_store(settings)
    specs = Specs(blobs)
    scratch = root / "scratch"
    scratch.mkdir()
    n, m = args.jobs, args.latency_jobs
    results: dict = {}

    direct(specs.take(2), blobs, scratch)  # warm-up: imports, first build
    lat_direct = direct(specs.take(m), blobs, scratch)
    t0 = time.perf_counter()
    direct(specs.take(n), blobs, scratch)
    results["direct"] = {"throughput": n / (time.perf_counter() - t0), "latency": lat_direct}

    # The embedded engine builds in a build pool, as the API process wires it.
    pool = BuildPool(settings.workers, settings.max_backlog, settings.retry_after_seconds)
    common: dict[str, Any] = {
        "store": cache,
        "blobs": blobs,
        "compiler": None,
        "workdir": data_dir / "work",
        "run_build": pool.run,
    }
    embedded = make_engine(Settings(data_dir=data_dir, redis_url=None), **common)
    await asyncio.gather(embedded.start(), pool.warm())
    await _latencies(embedded, specs.take(2))  # warm-up
    results["embedded"] = {
        "latency": await _latencies(embedded, specs.take(m)),
        "throughput": await _throughput(embedded, specs.take(n)),
    }
    await embedded.close()
    pool.shutdown()

    for poll in args.polls:
        farm = Farm(root, data_dir)
        try:
            farm.add_worker(poll)
            engine = make_engine(Settings(data_dir=data_dir, redis_url=farm.url), **common)
            await engine.start()
            await _latencies(engine, specs.take(2))  # warm-up: the worker's first build
            results[f"arq, 1 worker, poll {poll:g} s"] = {
                "latency": await _latencies(engine, specs.take(m)),
                "throughput": await _throughput(engine, specs.take(n)),
            }
            farm.add_worker(poll)
            await _throughput(engine, specs.take(4))  # warm-up the second worker
            results[f"arq, 2 workers, poll {poll:g} s"] = {
                "throughput": await _throughput(engine, specs.take(n))
            }
            await engine.close()
        finally:
            farm.close()
    return results


def main() -> None:
    global CHANNELS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=30, help="jobs per throughput run")
    parser.add_argument("--latency-jobs", type=int, default=8, help="jobs per latency run")
    parser.add_argument("--channels", type=int, default=CHANNELS, help="conv size (C x C)")
    parser.add_argument(
        "--polls", type=float, nargs="+", default=[0.25, 0.02], help="ANE_WORKER_POLL_S values"
    )
    args = parser.parse_args()
    CHANNELS = args.channels
    root = Path(tempfile.mkdtemp(prefix="bench-jobs-"))
    try:
        results = asyncio.run(_engines(args, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)

    base = statistics.median(results["direct"]["latency"])
    print(
        f"conv {CHANNELS}x{CHANNELS} S=64, format mil, {args.jobs} jobs per throughput run, "
        f"{args.latency_jobs} for latency; {os.cpu_count()} CPUs"
    )
    print("| path | jobs/s | latency ms | added over direct ms |")
    print("|---|---|---|---|")
    for name, r in results.items():
        lat = statistics.median(r["latency"]) if "latency" in r else None
        shown = f"{lat * 1e3:.1f}" if lat is not None else ""
        added = f"{(lat - base) * 1e3:.1f}" if lat is not None and name != "direct" else ""
        print(f"| {name} | {r['throughput']:.1f} | {shown} | {added} |")
    for poll in args.polls:
        one = results[f"arq, 1 worker, poll {poll:g} s"]["throughput"]
        two = results[f"arq, 2 workers, poll {poll:g} s"]["throughput"]
        print(
            f"poll {poll:g} s: scaling 2 workers / 1 worker {two / one:.2f}x; "
            f"1 worker / direct {one / results['direct']['throughput']:.2f}x"
        )


if __name__ == "__main__":
    main()
