"""Blob Storage v2 writer benchmarks, measured side by side in one run (ratios, not absolute times).

    .venv/bin/python -m bench.bench_blob

1. 256 MiB of fp16 weights (8 x 4096x4096): BlobWriter.write_to_path against open("wb") +
   ndarray.tofile of the same arrays. Target: ratio <= 1.5.
2. The same tensors arriving as fp32 and stored as fp16: BlobWriter (chunked conversion) against
   astype(float16) + tofile per tensor.
3. Peak memory (VmHWM, in a fresh subprocess) above the baseline once the inputs exist, while
   writing 4 x 4096x4096 fp32 -> fp16. Target: well under the fp16 payload (128 MiB).

Both sides write to the same temp directory, without fsync, so both mostly measure page-cache
writes. Nothing here asserts on time.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np

from app.blob import BlobDType, BlobWriter

N_TENSORS, DIM, REPEAT = 8, 4096, 5
MiB = 1 << 20


def _timed(fn: Callable[[], None], cleanup: Callable[[], None]) -> float:
    cleanup()  # both sides start from a missing file: no truncation cost on either side
    start = time.perf_counter()
    fn()
    elapsed = time.perf_counter() - start
    cleanup()
    return elapsed


def _bench_write(arrays: list[np.ndarray], convert: bool, tmp: str) -> tuple[float, float]:
    ours_path, base_path = os.path.join(tmp, "ours.bin"), os.path.join(tmp, "base.bin")

    def ours() -> None:
        w = BlobWriter()
        for a in arrays:
            w.add(a, BlobDType.FP16)
        w.write_to_path(ours_path)

    def baseline() -> None:
        with open(base_path, "wb") as f:
            for a in arrays:
                (a.astype(np.float16) if convert else a).tofile(f)

    def cleanup() -> None:
        for p in (ours_path, base_path):
            if os.path.exists(p):
                os.unlink(p)

    # Interleave repetitions so drift in page-cache state hits both sides alike.
    t_ours, t_base = [], []
    for _ in range(REPEAT):
        t_ours.append(_timed(ours, cleanup))
        t_base.append(_timed(baseline, cleanup))
    return statistics.median(t_ours), statistics.median(t_base)


_PEAK_SCRIPT = """
import io, json, sys
import numpy as np
from app.blob import BlobDType, BlobWriter

def hwm_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))

mode, path, n, dim = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(0)
arrays = [rng.standard_normal((dim, dim), dtype=np.float32) for _ in range(n)]
base = hwm_kib()
if mode == "blobwriter":
    w = BlobWriter()
    for a in arrays:
        w.add(a, BlobDType.FP16)
    w.write_to_path(path)
else:  # the obvious alternative: convert everything first, then write
    halves = [a.astype(np.float16) for a in arrays]
    with open(path, "wb") as f:
        for h in halves:
            h.tofile(f)
print(json.dumps({"extra_kib": hwm_kib() - base}))
"""


def _peak_extra_mib(mode: str, tmp: str, n: int = 4) -> float | None:
    if not os.path.exists("/proc/self/status"):
        return None
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _PEAK_SCRIPT,
            mode,
            os.path.join(tmp, f"{mode}.bin"),
            str(n),
            str(DIM),
        ],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["extra_kib"] / 1024


def main() -> None:
    rng = np.random.default_rng(0)
    fp32 = [rng.standard_normal((DIM, DIM), dtype=np.float32) for _ in range(N_TENSORS)]
    fp16 = [a.astype(np.float16) for a in fp32]
    payload_mib = sum(a.nbytes for a in fp16) / MiB
    with tempfile.TemporaryDirectory(prefix="bench_blob_") as tmp:
        w16 = _bench_write(fp16, convert=False, tmp=tmp)
        w32 = _bench_write(fp32, convert=True, tmp=tmp)
        peak_ours = _peak_extra_mib("blobwriter", tmp)
        peak_naive = _peak_extra_mib("naive", tmp)

    print("command: .venv/bin/python -m bench.bench_blob")
    print(
        f"{N_TENSORS} x {DIM}x{DIM} tensors, {payload_mib:.0f} MiB fp16 payload, median of {REPEAT} interleaved runs\n"
    )
    print("| case | BlobWriter | baseline | ratio | target |")
    print("|---|---|---|---|---|")
    print(
        f"| fp16 write ({payload_mib:.0f} MiB) | {w16[0]:.3f} s | {w16[1]:.3f} s (tofile) | {w16[0] / w16[1]:.2f} | <= 1.5 |"
    )
    print(
        f"| fp32 -> fp16 write | {w32[0]:.3f} s | {w32[1]:.3f} s (astype + tofile) | "
        f"{w32[0] / w32[1]:.2f} | - |"
    )
    if peak_ours is not None and peak_naive is not None:
        print(
            f"| peak extra RSS, 4x{DIM}x{DIM} fp32 -> fp16 (payload 128 MiB) | {peak_ours:.1f} MiB | "
            f"{peak_naive:.1f} MiB (convert all, then write) | {peak_ours / 128:.3f} of payload | << 1 |"
        )


if __name__ == "__main__":
    main()
