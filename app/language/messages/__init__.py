"""Core ML's protobuf messages (`MIL_pb2`, `Model_pb2`, `FeatureTypes_pb2`, ...), without coremltools.

The generated modules ship inside coremltools' `proto/` folder, but importing them as
`coremltools.proto.X` first runs `coremltools/__init__`, which loads the whole converter stack
(and torch where installed): seconds per process, for three message classes. This package's
search path is that folder instead, so `from app.language.messages import MIL_pb2` executes only
the generated file and its sibling imports. The descriptors land in protobuf's default pool under
the same names, so a later `import coremltools` reuses them: the message classes are the same
objects either way, and messages pass freely between this code and coremltools' loader.
"""

from __future__ import annotations

import importlib.util
import os
from typing import TYPE_CHECKING, Any

_coremltools = importlib.util.find_spec("coremltools")  # locates the package, does not run it
if _coremltools is None or not _coremltools.submodule_search_locations:
    raise ImportError("coremltools is not installed; its generated protobuf messages are needed")
__path__ = [os.path.join(_coremltools.submodule_search_locations[0], "proto")]

if TYPE_CHECKING:
    # The checker does not follow the search path set above, and the generated modules carry no
    # types: to it, every message module imported from here is Any.
    def __getattr__(name: str) -> Any: ...
