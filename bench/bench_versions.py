"""This checkout against an earlier commit, side by side in one run: build costs and import times.

    .venv/bin/python -m bench.bench_versions REV [--rounds 5]

Checks REV out into a temporary git worktree and runs each measurement in fresh processes,
alternating old / new / old / new, with the same interpreter and packages (only the `app`
package differs: PYTHONPATH and the working directory point at each tree). Reports the median
of the rounds for each side and new / old.

Measurements (each a median inside its process, after a warm-up):
  conv-mlpackage  kernel_zip of conv 64×64 S=16 as a zipped .mlpackage (400 builds)
  conv-mil        the same as the raw model.mil bundle (400 builds)
  ffn-mlpackage   the SwiGLU FFN graph at D=512, H=1408, S=64 (6.3 MB fp16) (30 builds)
  import-kernels  `import app.kernels` (a fresh interpreter each round)
  import-cli      `import app.cli` (what every ane-kernels command pays first)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

_BUILD = """
import json, statistics, sys, time
import numpy as np
from app.artifacts import kernel_zip
case = sys.argv[1]
if case.startswith("conv"):
    fmt = case.split("-")[1]
    w = {"weight": np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)}
    build = lambda: kernel_zip("conv", {"in_channels": 64, "out_channels": 64, "spatial": 16},
                               w, format=fmt)
    warm, runs = 50, 400
else:
    from app.graphs.examples import swiglu_ffn
    D, H, S = 512, 1408, 64
    rng = np.random.default_rng(0)
    w = {f"{k}.weight": (rng.standard_normal(s) * 0.05).astype(np.float16)
         for k, s in (("gate", (H, D, 1, 1)), ("up", (H, D, 1, 1)), ("down", (D, H, 1, 1)))}
    import inspect
    from app import artifacts
    from app.request import KernelRequest
    if "graph" in inspect.signature(KernelRequest.create).parameters:  # since the request kinds
        request = KernelRequest.create(graph=swiglu_ffn(D, H, S), weights=w, name="ffn")
    else:
        request = KernelRequest.create("graph", swiglu_ffn(D, H, S), w, name="ffn")
    build = lambda: artifacts.zip_bytes(artifacts.prepare(request))
    warm, runs = 3, 30
for _ in range(warm):
    build()
times = []
for _ in range(runs):
    t = time.perf_counter(); build(); times.append(time.perf_counter() - t)
print(json.dumps(statistics.median(times)))
"""

_IMPORT = """
import json, sys, time
t = time.perf_counter()
__import__(sys.argv[1])
print(json.dumps(time.perf_counter() - t))
"""

CASES = {
    "conv-mlpackage": (_BUILD, "conv-mlpackage"),
    "conv-mil": (_BUILD, "conv-mil"),
    "ffn-mlpackage": (_BUILD, "ffn"),
    "import-kernels": (_IMPORT, "app.kernels"),
    "import-cli": (_IMPORT, "app.cli"),
}


def _measure(tree: Path, script: str, arg: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", script, arg],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("rev", help="the commit to compare with")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--cases", nargs="*", default=list(CASES))
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix=".bench-versions-", dir=REPO) as tmp:
        old = Path(tmp) / "old"
        subprocess.run(
            ["git", "worktree", "add", "--detach", "-q", str(old), args.rev], cwd=REPO, check=True
        )
        try:
            rows = []
            for case in args.cases:
                script, arg = CASES[case]
                before, after = [], []
                for _ in range(args.rounds):
                    before.append(_measure(old, script, arg))
                    after.append(_measure(REPO, script, arg))
                b, a = statistics.median(before), statistics.median(after)
                rows.append((case, b, a))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=REPO)
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    print(f"median of {args.rounds} alternating rounds, each in a fresh process")
    print(f"| measurement | {args.rev} | {head} (this checkout) | new / old |")
    print("|---|---:|---:|---:|")
    for case, b, a in rows:
        print(f"| {case} | {b * 1e3:.2f} ms | {a * 1e3:.2f} ms | {a / b:.2f} |")


if __name__ == "__main__":
    main()
