"""Default ceilings on the size of a tensor and of a program: one source for the settings
(ANE_MAX_TENSOR_ELEMENTS, ...) and the IR's builder (app/mil/ceilings.py), which may not read
settings.

They admit real models with room to spare: a 128,256 x 2,048 embedding or head (262M elements,
512 MiB of fp16), logits for 4,096 positions over that vocabulary (525M elements), the 2-3 GB
program of a 1B-class model; and refuse absurd shapes ([16384] * 5, 8 TiB of fp16).

A JSON body, and every JSON file a user hands in (app/core/jsonfile.py), is held to
DEFAULT_JSON_BYTES (ANE_MAX_JSON_BYTES): a config.json is a few KB, a kit.json of a 126-layer
model about 100 KB.
"""

MiB = 1 << 20
GiB = 1 << 30

DEFAULT_JSON_BYTES = MiB

DEFAULT_TENSOR_ELEMENTS = 1 << 30
DEFAULT_TENSOR_BYTES = 2 * GiB
DEFAULT_PROGRAM_ELEMENTS = 1 << 32  # over every value and constant of the program
DEFAULT_PROGRAM_BYTES = 8 * GiB
