"""HTTP benchmark: request rates as ratios to GET /healthz on the same server, in one run.

    .venv/bin/python bench/bench_http.py [--duration 3] [--rounds 3] [--connections 32]

Starts `uvicorn app.main:app` as a real subprocess on a free loopback port with a temporary data
dir beside the checkout, then drives it with wrk (Debian's `wrk`; installed with apt-get when
missing and running as root). Each scenario is measured in alternating rounds with /healthz
(after one unmeasured round of each) and the ratio of the medians is reported, so a neighbour's
load on the shared machine hits both sides alike.

Scenarios:
  hit-digest   conv 64×64, weight referenced by blob digest, artifact cached
  hit-inline   conv 64×64, weight inline as a JSON list (~90 KB body), artifact cached
  miss-inline  conv 64×64 inline, every request with distinct weights (a new build each time)
  upload       4096×4096 fp32 .npy (64 MiB) as a multipart part -> mlpackage, end to end with
               curl as the client (reading the zip to the end, keeping it nowhere: the client's
               disk is not the service's); MB/s of the upload and the peak RSS of the server and
               its build workers above their idle RSS. Once with the conv's default fp16 weight
               storage (the packager converts), once with weight_dtype=fp32 (stored as sent).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parent.parent
CONV = {"in_channels": 64, "out_channels": 64, "spatial": 16}

MISS_LUA = """
local f = io.open("%(path)s"); local body = f:read("*a"); f:close()
local prefix, middle, suffix = body:match("^(.-)__A__(.-)__B__(.*)$")
local n, seed = 0, 0
function init(args) seed = tonumber(args[1]) end
-- Two weight values that together are unique per request (integers, exact in fp16 range).
function request()
  n = n + 1
  local a, b = n %% 50000, seed * 100 + math.floor(n / 50000)
  return wrk.format("POST", nil, {["Content-Type"] = "application/json"},
                    prefix .. a .. middle .. b .. suffix)
end
"""
POST_LUA = """
local f = io.open("%(path)s"); local body = f:read("*a"); f:close()
wrk.method = "POST"; wrk.body = body; wrk.headers["Content-Type"] = "application/json"
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_wrk() -> str:
    found = shutil.which("wrk")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "wrk"],
            check=True,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
        found = shutil.which("wrk")
    if not found:
        sys.exit("wrk is needed: apt-get install wrk")
    return found


def _found(pattern: str, text: str, flags: int = 0) -> str:
    """The first group of `pattern` in a tool's output; a changed format is an error."""
    match = re.search(pattern, text, flags)
    if match is None:
        raise RuntimeError(f"no {pattern!r} in:\n{text}")
    return match.group(1)


def _seconds(text: str) -> float:
    found = re.match(r"([\d.]+)(us|ms|s|m)", text)
    if found is None:
        raise RuntimeError(f"wrk printed a latency this does not read: {text!r}")
    value, unit = found.groups()
    return float(value) * {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}[unit]


def wrk(
    url: str,
    duration: float,
    connections: int,
    script: Path | None = None,
    args: tuple[str, ...] = (),
) -> dict:
    cmd = [ensure_wrk(), "-t1", f"-c{connections}", f"-d{max(1, round(duration))}s", "--latency"]
    if script:
        cmd += ["-s", str(script)]
    cmd += [url]
    if args:
        cmd += ["--", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    if bad or errors:
        raise RuntimeError(f"wrk saw failures:\n{out}")
    return {
        "rps": float(_found(r"Requests/sec:\s+([\d.]+)", out)),
        # The distribution line ("     99%   12.34ms"), not a "+/- Stdev" such as "98.99%".
        "p99": _seconds(_found(r"^\s+99%\s+(\S+)", out, re.M)),
    }


class Server:
    def __init__(self, data_dir: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "ANE_DATA_DIR": str(data_dir)}
        self.log = open(data_dir.parent / "uvicorn.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "app.main:app",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--no-access-log",
            ],
            cwd=REPO,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{self.url}/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("the server did not start") from None
                time.sleep(0.1)

    def pids(self) -> list[int]:
        """The server and its build workers."""
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        return [self.proc.pid, *(int(p) for p in children.split())]

    @staticmethod
    def status(pid: int, field: str) -> int:
        """VmRSS / VmHWM of a process, in bytes."""
        text = Path(f"/proc/{pid}/status").read_text()
        return int(_found(rf"{field}:\s+(\d+) kB", text)) * 1024

    @staticmethod
    def reset_peak(pid: int) -> None:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM to the current RSS

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=20)
        self.log.close()


def side_by_side(server: Server, name: str, run, args, rounds: int) -> dict:
    """Alternate /healthz and the scenario; report medians and the ratio of the medians. One
    unmeasured round of each first: a fresh server's first seconds (directories created, caches
    and worker heaps growing) are not its steady state."""
    wrk(f"{server.url}/healthz", args.duration, args.connections)
    run(-1)  # the miss scenario's seed 0: requests the measured rounds never repeat
    base, scen = [], []
    for i in range(rounds):
        base.append(wrk(f"{server.url}/healthz", args.duration, args.connections))
        scen.append(run(i))
    hz = statistics.median(r["rps"] for r in base)
    rps = statistics.median(r["rps"] for r in scen)
    return {
        "scenario": name,
        "rps": rps,
        "healthz_rps": hz,
        "ratio": rps / hz,
        "p99_ms": statistics.median(r["p99"] for r in scen) * 1e3,
        "healthz_p99_ms": statistics.median(r["p99"] for r in base) * 1e3,
    }


def upload_run(server: Server, tmp: Path, runs: int, weight_dtype: str) -> dict:
    """curl uploads a 4096×4096 fp32 .npy as a multipart part (spec first) and reads the zip;
    every run has distinct weights, so each one uploads, hashes, builds and packages."""
    params = {
        "in_channels": 4096,
        "out_channels": 4096,
        "spatial": 16,
        "weight_dtype": weight_dtype,
    }
    rng = np.random.default_rng(0)
    weights = (0.01 * rng.standard_normal((4096, 4096))).astype(np.float32)
    times, peaks = [], []
    # The load scenarios before this leave thousands of small files to write back; flush them
    # now, so the uploads are not timed against another scenario's disk traffic.
    os.sync()
    for i in range(runs):
        weights[0, 0] = 1000 + i + (100 if weight_dtype == "fp32" else 0)
        npy = tmp / "upload.npy"
        np.save(npy, weights)
        time.sleep(0.5)
        pids = server.pids()
        idle = sum(server.status(p, "VmRSS") for p in pids)
        for p in pids:
            server.reset_peak(p)
        out = subprocess.run(
            [
                "curl",
                "-sS",
                "-o",
                os.devnull,
                "-w",
                "%{http_code} %{time_total}",
                "-F",
                f"spec={json.dumps(params)}",
                "-F",
                f"weight=@{npy}",
                f"{server.url}/v1/kernels/conv",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        if out[0] != "200":
            raise RuntimeError(f"upload failed: {out}")
        times.append(float(out[1]))
        peaks.append(sum(server.status(p, "VmHWM") for p in pids) - idle)
    size = npy.stat().st_size
    return {
        "scenario": f"upload ({weight_dtype} weights stored)",
        "bytes": size,
        "seconds": statistics.median(times),
        "mb_per_s": size / statistics.median(times) / 1e6,
        "peak_rss_over_idle": max(peaks),
        "peak_ratio": max(peaks) / size,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--duration", type=int, default=3, help="seconds per wrk run")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds per scenario")
    p.add_argument("--connections", type=int, default=32)
    p.add_argument("--uploads", type=int, default=3, help="uploads per weight dtype (0: none)")
    p.add_argument("--no-wrk", action="store_true", help="only the upload scenarios")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args()
    ensure_wrk()
    # Beside the checkout, as `make run` keeps its data, not in /tmp: an ext4 without a journal
    # (this machine's) does not reuse an inode freed in the last minute (six while its table
    # block is dirty) and walks past each such inode on every create. After a test run emptied
    # /tmp, a create there cost 0.2-0.7 ms instead of ~15 us: the miss scenario then measured
    # the file system's recent history rather than the service.
    with tempfile.TemporaryDirectory(prefix=".bench-http-", dir=REPO) as tmp:
        tmp_path = Path(tmp)
        server = Server(tmp_path / "data")
        try:
            results = run_all(server, tmp_path, args)
        finally:
            server.stop()
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(
        f"\nwrk -t1 -c{args.connections} -d{args.duration}s, median of {args.rounds} "
        "alternating rounds; ratios to GET /healthz on the same server"
    )
    print("| scenario | req/s | healthz req/s | ratio | p99 ms | healthz p99 ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in results:
        if "rps" in r:
            print(
                f"| {r['scenario']} | {r['rps']:.0f} | {r['healthz_rps']:.0f} | "
                f"{r['ratio']:.2f} | {r['p99_ms']:.1f} | {r['healthz_p99_ms']:.1f} |"
            )
    print("\n| upload (curl, 64 MiB .npy -> mlpackage) | ms | MB/s | peak RSS over idle |")
    print("|---|---:|---:|---:|")
    for u in results:
        if "bytes" in u:
            print(
                f"| {u['scenario']} | {u['seconds'] * 1e3:.0f} | {u['mb_per_s']:.0f} | "
                f"{u['peak_rss_over_idle'] / 2**20:.0f} MiB ({u['peak_ratio']:.2f}× upload) |"
            )


def run_all(server: Server, tmp: Path, args) -> list[dict]:
    out = [] if args.no_wrk else wrk_scenarios(server, tmp, args)
    if args.uploads:
        out.append(upload_run(server, tmp, args.uploads, "fp16"))
        out.append(upload_run(server, tmp, args.uploads, "fp32"))
    return out


def wrk_scenarios(server: Server, tmp: Path, args) -> list[dict]:
    rng = np.random.default_rng(1)
    w = (0.1 * rng.standard_normal((64, 64))).astype(np.float32)
    with httpx.Client(base_url=server.url, timeout=60) as c:
        buf = io.BytesIO()
        np.save(buf, w)
        digest = c.post("/v1/blobs", files={"file": ("w.npy", buf.getvalue())}).json()["digest"]
        by_digest = {**CONV, "weights": {"weight": digest}}
        inline = {**CONV, "weights": {"weight": w.tolist()}}
        for body in (by_digest, inline):  # prime the cache (and the exact-request memo)
            assert c.post("/v1/kernels/conv", json=body).status_code == 200
    scripts = {}
    for name, body in (("digest", by_digest), ("inline", inline)):
        (tmp / f"{name}.json").write_text(json.dumps(body))
        scripts[name] = tmp / f"{name}.lua"
        scripts[name].write_text(POST_LUA % {"path": tmp / f"{name}.json"})
    template = json.dumps({**CONV, "weights": {"weight": w.tolist()}})
    first = json.dumps(w.tolist()[0][:2])[1:-1]  # "a, b": replaced by unique numbers
    a, b = first.split(", ")
    (tmp / "miss.json").write_text(template.replace(f"[[{a}, {b}", "[[__A__, __B__", 1))
    scripts["miss"] = tmp / "miss.lua"
    scripts["miss"].write_text(MISS_LUA % {"path": tmp / "miss.json"})
    url = f"{server.url}/v1/kernels/conv"
    out = [
        side_by_side(
            server,
            "hit-digest",
            lambda i: wrk(url, args.duration, args.connections, scripts["digest"]),
            args,
            args.rounds,
        ),
        side_by_side(
            server,
            "hit-inline",
            lambda i: wrk(url, args.duration, args.connections, scripts["inline"]),
            args,
            args.rounds,
        ),
        side_by_side(
            server,
            "miss-inline",
            lambda i: wrk(url, args.duration, args.connections, scripts["miss"], (str(i + 1),)),
            args,
            args.rounds,
        ),
    ]
    return out


if __name__ == "__main__":
    main()
