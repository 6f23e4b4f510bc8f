"""Compiled helpers of the checkpoint reader, each optional (an install without a C compiler
goes on without them): `_fp16`, fp32/bf16 -> fp16 with the CPU's F16C instruction
(app/checkpoints/convert.py says when it is used).

They sit in a package of their own, which imports nothing: `app.checkpoints` imports the
converter, so a converter importing its extension from `app.checkpoints` itself would make the
import graph, package `__init__`s included, a cycle (tests/test_import_cycles.py).
"""
