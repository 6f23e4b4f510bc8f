"""Core AI (.aimodel) benchmarks, measured side by side in one run (ratios, not absolute times).

    .venv/bin/python -m bench.bench_coreai

1. Build: the SwiGLU FFN graph example (D=512, H=1408, S=64: 6.3 MB of fp16 weights) and a
   1024×1024 conv (S=64) as `format: "aimodel"` zips through the one artifact builder, against
   the same program written directly with coreai.authoring and saved with `save_asset` (what a
   person would write by hand). Alternating, median of 7 each, after a warm-up of each.
   Target: <= 1.2×.
2. Verify: the same requests with `verify`, against without it; the difference is the reference
   executor plus Apple's runtime in its child process (start-up, import, lowering, one call).
"""

# No `from __future__ import annotations`: coreai's @graph reads the annotations at run time.
import statistics
import tempfile
import time
from pathlib import Path
from typing import Annotated

import numpy as np

D, H, S = 512, 1408, 64
C = 1024
REPEAT = 7


def _weights(rng) -> dict[str, np.ndarray]:
    return {
        "gate.weight": (rng.standard_normal((H, D)) * D**-0.5).astype(np.float16),
        "up.weight": (rng.standard_normal((H, D)) * D**-0.5).astype(np.float16),
        "down.weight": (rng.standard_normal((D, H)) * H**-0.5).astype(np.float16),
    }


def _direct_ffn(weights: dict[str, np.ndarray]) -> None:
    """The FFN written by hand with coreai.authoring, saved as an .aimodel."""
    from coreai.authoring import (
        AIProgram,
        Module,
        TensorType,
        Value,
        conv2d,
        float16,
        graph,
        mul,
        silu,
    )

    def w(key):
        return weights[key].reshape(*weights[key].shape, 1, 1)

    module = Module.create()
    with module:

        @graph
        def ffn(
            x: Annotated[Value, TensorType((1, D, 1, S), float16)],
        ) -> Annotated[Value, TensorType((1, D, 1, S), float16, name="y")]:
            gate = conv2d(x, w("gate.weight"), [1, 1], [1, 1], 1)
            up = conv2d(x, w("up.weight"), [1, 1], [1, 1], 1)
            return conv2d(mul(silu(gate), up), w("down.weight"), [1, 1], [1, 1], 1)

    with tempfile.TemporaryDirectory() as tmp:
        AIProgram(module).save_asset(Path(tmp) / "ffn.aimodel")


def _direct_conv(weight: np.ndarray) -> None:
    from coreai.authoring import AIProgram, Module, TensorType, Value, conv2d, float16, graph

    module = Module.create()
    with module:

        @graph
        def conv(
            x: Annotated[Value, TensorType((1, C, 1, S), float16)],
        ) -> Annotated[Value, TensorType((1, C, 1, S), float16, name="y")]:
            return conv2d(x, weight.reshape(C, C, 1, 1), [1, 1], [1, 1], 1)

    with tempfile.TemporaryDirectory() as tmp:
        AIProgram(module).save_asset(Path(tmp) / "conv.aimodel")


def _time(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _median3(outer, inner, *args) -> float:
    return statistics.median(_time(lambda: outer(inner(*args))) for _ in range(3))


def _alternating(ours, theirs) -> tuple[float, float]:
    ours(), theirs()  # warm-up: imports, first use of the builder and of the library
    a, b = [], []
    for _ in range(REPEAT):
        a.append(_time(ours))
        b.append(_time(theirs))
    return statistics.median(a), statistics.median(b)


def main() -> None:
    from app import artifacts
    from app.graphs.examples import swiglu_ffn
    from app.request import KernelRequest

    rng = np.random.default_rng(0)
    ffn_weights = _weights(rng)
    conv_weight = (rng.standard_normal((C, C)) * C**-0.5).astype(np.float16)
    cases = {
        f"SwiGLU FFN graph D={D} H={H} S={S}": (
            KernelRequest.create(graph=swiglu_ffn(D, H, S), weights=ffn_weights, format="aimodel"),
            lambda: _direct_ffn(ffn_weights),
        ),
        f"conv {C}×{C} S={S}": (
            KernelRequest.create(
                "conv",
                {"in_channels": C, "out_channels": C, "spatial": S},
                {"weight": conv_weight},
                format="aimodel",
            ),
            lambda: _direct_conv(conv_weight),
        ),
    }
    print("| case | .aimodel zip (ours) | coreai.authoring direct | ratio | target |")
    print("|---|---|---|---|---|")
    for name, (request, direct) in cases.items():
        ours, theirs = _alternating(
            lambda request=request: artifacts.zip_bytes(artifacts.prepare(request)), direct
        )
        print(
            f"| {name} | {ours * 1e3:.1f} ms | {theirs * 1e3:.1f} ms | "
            f"{ours / theirs:.2f}× | ≤ 1.2× |"
        )
    print()
    print("| case | build | build + verify | verify adds | of which Apple's runtime |")
    print("|---|---|---|---|---|")
    from app.reference.apple import apple_report

    for name, (request, _) in cases.items():
        verified = KernelRequest.create(
            request.op, request.params, request.arrays(), format="aimodel", verify=True
        )
        plain = _median3(artifacts.zip_bytes, artifacts.prepare, request)
        checked = _median3(artifacts.zip_bytes, artifacts.prepare, verified)
        prepared = artifacts.prepare(request)
        apple = _median3(lambda report: report, apple_report, prepared.build, prepared.aimodel)
        print(
            f"| {name} | {plain * 1e3:.0f} ms | {checked * 1e3:.0f} ms | "
            f"{(checked - plain) * 1e3:.0f} ms | {apple * 1e3:.0f} ms |"
        )


if __name__ == "__main__":
    main()
