"""ANE Kernel Service: Apple Neural Engine kernels compiled on demand."""

__version__ = "0.3.0"
GENERATOR = "ane-kernels"
