"""Where a program's BLOBFILE values point: paths under `@model_path`, the folder of the model."""

MODEL_PATH = "@model_path/"
# The one weight file this service writes (coremltools writes the same name).
WEIGHT_PATH = f"{MODEL_PATH}weights/weight.bin"
