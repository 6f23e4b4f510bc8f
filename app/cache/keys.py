"""The artifact cache key: sha256 over the canonical form of everything that shapes the bytes."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from app import __version__
from app.packaging import coremltools_version

# Bump when the key's layout changes, so old entries are simply never hit again.
KEY_VERSION = 1


def artifact_key(
    *,
    op: str,
    params: Mapping[str, Any],
    weights: Mapping[str, tuple[str, str, tuple[int, ...]]],
    fmt: str,
    target: str,
    name: str,
    extra: Mapping[str, Any] | None = None,
) -> str:
    """`params` are the normalised params (defaults filled in, as pydantic dumps them);
    `weights` maps a weight name to (digest, dtype, shape): the same bytes read as another
    dtype or shape are another tensor."""
    doc = {
        "v": KEY_VERSION,
        "op": op,
        "params": dict(params),
        "weights": {k: [d, t, list(s)] for k, (d, t, s) in sorted(weights.items())},
        "format": fmt,
        "target": target,
        "name": name,
        "generator": __version__,
        "coremltools": coremltools_version(),
        **(extra or {}),
    }
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()
