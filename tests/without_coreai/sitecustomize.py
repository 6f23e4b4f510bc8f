# TEST SETUP, not part of the service: put this directory on PYTHONPATH to make a Python process
# behave as if coreai-core were not installed (its import fails, its distribution is not found),
# the way a machine without a wheel for its platform is. Used by tests/test_coreai_format.py.
import importlib.abc
import importlib.metadata
import sys

_real_version = importlib.metadata.version


class _Hidden(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "coreai" or name.startswith("coreai."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def _version(name):
    if name.replace("_", "-").lower() == "coreai-core":
        raise importlib.metadata.PackageNotFoundError(name)
    return _real_version(name)


sys.meta_path.insert(0, _Hidden())
importlib.metadata.version = _version
