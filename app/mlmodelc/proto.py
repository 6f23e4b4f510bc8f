"""Core ML's protobuf messages, imported in one place and quietly: on Linux the first import of
coremltools prints a line for each macOS-only library it lacks (and a warning about an untested
PyTorch), which would land on every command's stderr."""

from app.toolchain import quiet_coremltools

with quiet_coremltools():
    from coremltools.proto import FeatureTypes_pb2, MIL_pb2, Model_pb2

__all__ = ["FeatureTypes_pb2", "MIL_pb2", "Model_pb2"]
