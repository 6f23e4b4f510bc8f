"""The child process that runs an `.aimodel` with Apple's CPU runtime (coreai-core):

    python -m app.coreai.child WORKDIR [WORKDIR ...]

WORKDIR holds the asset (`model.aimodel/`) and `calls.json`: the calls to make in order, each a
function name and an `.npz` of its inputs (`in:<name>`) and starting states (`state:<name>`).
Each call's outputs and states after it are written to `out<i>.npz`, then `done` is written
last. Several WORKDIRs run one after another, each finished by its own `done`; the process ends
with `os._exit` before interpreter teardown.

Why a process of its own: the runtime can abort at interpreter exit (a Swift worker thread calls
back into Python while the interpreter finalises: SIGABRT in a quarter to three quarters of
runs), and a runtime crash must never take a service worker down. The parent trusts `done`, not
the exit status. `ANE_COREAI_ABORT_AFTER_RESULTS=1` reproduces that abort on purpose, after the
results are written, so the parent's handling of it can be tested.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from app.coreai.exchange import ASSET, CALLS, DONE

if TYPE_CHECKING:  # imported where they run: the coreai extra loads only in this child
    from coreai.runtime import NDArray
    from PIL.Image import Image  # what the runtime's functions take besides tensors


def _arrays(
    prefix: str, values: Mapping[str, NDArray | Image], tensor: type[NDArray]
) -> dict[str, Any]:
    """Tensors by `<prefix>:<name>`, as the parent reads them (the programs give no images)."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        if not isinstance(value, tensor):
            raise TypeError(f"{prefix} {name!r} is an image, not a tensor")
        out[f"{prefix}:{name}"] = np.asarray(value.numpy())
    return out


async def _run(workdir: Path) -> None:
    from coreai.authoring import AIModelAsset
    from coreai.runtime import NDArray

    calls = json.loads((workdir / CALLS).read_text())
    async with AIModelAsset.load(workdir / ASSET).executable() as model:
        functions = {}
        for i, call in enumerate(calls):
            name = call["function"]
            if name not in functions:
                functions[name] = model.load_function(name)
            with np.load(workdir / call["arrays"]) as given:
                inputs: dict[str, NDArray | Image] = {
                    k[3:]: NDArray(given[k]) for k in given.files if k.startswith("in:")
                }
                states = {k[6:]: NDArray(given[k]) for k in given.files if k.startswith("state:")}
            out = (
                await functions[name](inputs, state=states)
                if states
                else await functions[name](inputs)
            )
            arrays = {**_arrays("out", out, NDArray), **_arrays("state", states, NDArray)}
            np.savez(workdir / f"out{i}.npz", **arrays)
        functions.clear()
    gc.collect()
    await asyncio.sleep(0.05)  # let the runtime's worker threads settle before the loop closes


def main(argv: list[str]) -> int:
    for workdir in map(Path, argv):  # several: one after another, each with its own `done`
        try:
            asyncio.run(_run(workdir))
        except Exception as exc:  # the runtime's own message, for the parent to report
            sys.stderr.write(f"{type(exc).__name__}: {exc}\n")
            sys.stderr.flush()
            os._exit(1)
        (workdir / DONE).write_text("ok\n")
    sys.stdout.flush()
    sys.stderr.flush()
    if os.environ.get("ANE_COREAI_ABORT_AFTER_RESULTS") == "1":
        os.abort()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
