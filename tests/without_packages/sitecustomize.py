# TEST SETUP, not part of the service: put this directory on PYTHONPATH to make a Python process
# behave as if some optional packages were not installed (their import fails, their distribution
# is not found), the way a machine without a wheel for its platform, or without an extra, is.
# HIDDEN_PACKAGES names them as "module=distribution" pairs, comma-separated, e.g.
# "coreai=coreai-core,onnx=onnx". Used by tests/test_coreai_format.py and tests/test_api_onnx.py.
import importlib.abc
import importlib.metadata
import os
import sys

_real_version = importlib.metadata.version
_HIDDEN = dict(
    pair.split("=", 1) for pair in os.environ.get("HIDDEN_PACKAGES", "").split(",") if pair
)
_DISTRIBUTIONS = {d.replace("_", "-").lower() for d in _HIDDEN.values()}


class _Hidden(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in _HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def _version(name):
    if name.replace("_", "-").lower() in _DISTRIBUTIONS:
        raise importlib.metadata.PackageNotFoundError(name)
    return _real_version(name)


sys.meta_path.insert(0, _Hidden())
importlib.metadata.version = _version
