"""Where things sit inside the artifacts: one place for every path a zip or package holds."""

from __future__ import annotations

from app.language.paths import WEIGHT_PATH

KERNEL_JSON = "kernel.json"
VERIFICATION_JSON = "verification.json"
CHAIN_JSON = (
    "chain.json"  # a split graph: its programs in order, and which output feeds which input
)

# .mlpackage: <name>.mlpackage/Manifest.json and the Core ML item under Data/
PACKAGE_SUFFIX = ".mlpackage"
MANIFEST = "Manifest.json"
DATA_DIR = "Data/com.apple.CoreML"
MODEL_FILE = f"{DATA_DIR}/model.mlmodel"
WEIGHTS_DIR = f"{DATA_DIR}/weights"
PACKAGE_WEIGHT_FILE = f"{WEIGHTS_DIR}/weight.bin"

# mil bundle: model.mil beside the weight file its BLOBFILE paths name (relative to the model)
MIL_TEXT = "model.mil"
MIL_WEIGHT_FILE = WEIGHT_PATH.removeprefix("@model_path/")


def package_root(name: str) -> str:
    return f"{name}{PACKAGE_SUFFIX}"
