"""`make bench` / `python -m bench`: every benchmark in turn, each printing its own table.

The tables go into BENCHMARKS.md by hand, with the command above each one; run a single one with
`python -m bench.bench_core` (or bench_blob, bench_jobs, bench_http).
"""

import runpy
import sys

SUITES = [
    "bench.bench_core",
    "bench.bench_blob",
    "bench.bench_graphs",
    "bench.bench_passes",
    "bench.bench_coreai",
    "bench.bench_checkpoint",
    "bench.bench_kit_scale",
    "bench.bench_kit_quantized",
    "bench.bench_jobs",
    "bench.bench_http",
]

if __name__ == "__main__":
    for name in sys.argv[1:] or SUITES:
        print(f"\n## {name}\n", flush=True)
        runpy.run_module(name, run_name="__main__")
