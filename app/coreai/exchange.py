"""The files the runtime's parent and child processes exchange in their work directory (kept
apart from both, so the parent never imports the child's module: `python -m` would then run a
module already imported)."""

ASSET = "model.aimodel"  # the asset to run
CALLS = "calls.json"  # the calls to make, in order, each with its .npz of arrays
DONE = "done"  # written last by the child: every result before it is complete
