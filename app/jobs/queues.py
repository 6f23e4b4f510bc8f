"""The job queues: which kind of worker runs which job."""

from __future__ import annotations

# .mlmodelc jobs asking for Core ML's placement report, and .aimodel jobs compiled for device
# architectures (`xcrun coreai-build`): macOS workers with Xcode
QUEUE_MACOS = "ane-macos"
# everything else: generation, packaging and .mlmodelc by the linux backend, on any worker
QUEUE_LINUX = "ane-linux"
QUEUES = (QUEUE_MACOS, QUEUE_LINUX)
