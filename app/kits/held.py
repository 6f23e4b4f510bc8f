"""The weights the kit's programs compute with (quantized ones as they decompress), kept on disk
while the kit is built, for the float64 reference that verifies it (app/kits/reference.py): each
program's are written here as it is built and let go, and read back memory-mapped, one layer or
one head piece at a time, when the reference needs them.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

_LAYER = re.compile(r"^layers\.(\d+)\.")


class HeldWeights:
    """A folder of .npy files, one per tensor, named as the programs name their weights."""

    def __init__(self, folder: Path):
        self.folder = folder
        self._layers: dict[int, list[str]] = defaultdict(list)
        self._heads: dict[int, str] = {}

    def _put(self, name: str, values: np.ndarray) -> None:
        np.save(self.folder / f"{name}.npy", np.ascontiguousarray(values), allow_pickle=False)

    def _get(self, name: str) -> np.ndarray:
        return np.load(self.folder / f"{name}.npy", mmap_mode="r", allow_pickle=False)

    def put_layers(self, weights: dict[str, np.ndarray]) -> None:
        """A decoder program's weights, `layers.<i>.<tensor>`."""
        for name, values in weights.items():
            match = _LAYER.match(name)
            assert match is not None, name
            self._put(name, values)
            self._layers[int(match.group(1))].append(name)

    def put_head_rows(self, piece: int, rows: np.ndarray) -> None:
        """Head piece `piece`'s lm_head rows (pieces are built in any order)."""
        name = f"head.{piece}"
        self._put(name, rows)
        self._heads[piece] = name

    def layer(self, i: int) -> dict[str, np.ndarray]:
        return {name: self._get(name) for name in self._layers[i]}

    def head_pieces(self) -> Sequence[np.ndarray]:
        """Every head piece's rows, in vocabulary order, each mapped only when it is taken."""
        return _Pieces(self)


class _Pieces(Sequence[np.ndarray]):
    def __init__(self, held: HeldWeights):
        self._held = held

    def __len__(self) -> int:
        return len(self._held._heads)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return self._held._get(self._held._heads[sorted(self._held._heads)[index]])
