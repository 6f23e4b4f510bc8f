"""`.mlmodelc` writer benchmarks: writing the bundle from a package against writing the package
itself, measured side by side in one run (ratios, not absolute times).

    .venv/bin/python -m bench.bench_mlmodelc

1. A catalog kernel (conv 2048×2048, spatial 64: 8 MiB of fp16 weights). The package is written
   by the project's writer (`write_kernel_zip(build, f, "mlpackage")`); the bundle by
   `compile_package` from that package, unzipped.
2. The largest golden (silero-vad-unified-v6.0.0: 137 ops, 862 KiB of weights), against two
   ways coremltools writes the package: from its in-memory spec and weights
   (`MLModel(spec, weights_dir=...).save`: serialise, then copy), and re-saving a package it
   loaded (`MLModel(path).save`: a directory copy, the lower bound of writing anything). The
   bundle by `compile_package`, which also prints 137 ops as text and derives metadata.json.

Target for both: bundle / package <= 1.5×.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

GOLDEN = (
    Path(__file__).resolve().parent.parent
    / "tests/fixtures/goldens/silero-vad/silero-vad-unified-v6.0.0/source.mlpackage"
)
CONV = {"in_channels": 2048, "out_channels": 2048, "spatial": 64}


def _seconds(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _side_by_side(package: Callable[[], None], bundle: Callable[[], None], rounds: int) -> dict:
    package()  # warm both (imports, page cache)
    bundle()
    # Alternate so a neighbour's load on the shared machine hits both alike.
    t_package, t_bundle = [], []
    for _ in range(rounds):
        t_package.append(_seconds(package))
        t_bundle.append(_seconds(bundle))
    p, b = statistics.median(t_package), statistics.median(t_bundle)
    return {
        "package_ms": round(p * 1e3, 2),
        "mlmodelc_ms": round(b * 1e3, 2),
        "ratio": round(b / p, 3),
    }


def bench_catalog_kernel(tmp: Path, rounds: int = 7) -> dict:
    import numpy as np

    from app.catalog_build import build_kernel
    from app.mlmodelc import compile_package
    from app.packaging import write_kernel_zip

    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((2048, 2048)) * 0.02).astype(np.float16)
    build = build_kernel("conv", CONV, {"weight": weight})
    zip_path = tmp / "conv.zip"

    def package() -> None:
        with zip_path.open("wb") as f:
            write_kernel_zip(build, f, "mlpackage")

    package()
    unzipped = tmp / "unzipped"
    shutil.unpack_archive(zip_path, unzipped, "zip")
    source = next(unzipped.glob("*.mlpackage"))

    def bundle() -> None:
        compile_package(source, tmp / "conv.mlmodelc")

    return _side_by_side(package, bundle, rounds)


def bench_largest_golden(tmp: Path, from_spec: bool, rounds: int = 15) -> dict:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        import coremltools as ct

    from app.mlmodelc import compile_package

    loaded = ct.models.MLModel(str(GOLDEN), skip_model_load=True)
    spec = loaded.get_spec()
    weights = str(GOLDEN / "Data/com.apple.CoreML/weights")

    def package() -> None:
        target = tmp / "silero.mlpackage"
        if target.exists():
            shutil.rmtree(target)
        model = (
            ct.models.MLModel(spec, weights_dir=weights, skip_model_load=True)
            if from_spec
            else loaded
        )
        model.save(str(target))

    def bundle() -> None:
        compile_package(GOLDEN, tmp / "silero.mlmodelc")

    return _side_by_side(package, bundle, rounds)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-mlmodelc-") as tmp:
        root = Path(tmp)
        for sub in ("k", "g1", "g2"):
            (root / sub).mkdir()
        results = {
            "catalog kernel (conv 2048x2048, 8 MiB) vs the project's package writer": bench_catalog_kernel(
                root / "k"
            ),
            "largest golden (silero-vad v6) vs coremltools writing it from its spec": bench_largest_golden(
                root / "g1", True
            ),
            "largest golden (silero-vad v6) vs coremltools re-saving it (a copy)": bench_largest_golden(
                root / "g2", False
            ),
        }
    print("| case | write package (ms) | write .mlmodelc (ms) | ratio (goal <= 1.5) |")
    print("|---|---|---|---|")
    for case, r in results.items():
        print(f"| {case} | {r['package_ms']} | {r['mlmodelc_ms']} | {r['ratio']}x |")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
