"""Property tests of every reader of a file a user hands in: random JSON (and valid documents
with one key replaced by random JSON, and random bytes) at the config.json, generation_config,
shard index, kit.json, device-check report and rows file readers, random and mutated bytes at
the zip reader and the kit on top of it. The only failure allowed is a clear refusal (a
FieldError naming a field); no other exception, and no call allocates more than a bounded
amount of memory."""

from __future__ import annotations

import contextlib
import json
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kit_support import KIT_QWEN3, write_model
from test_hostile_calibrate import report

from app.checkpoints.config import read_config
from app.checkpoints.files import open_checkpoint
from app.cli import main
from app.core.jsonfile import read_json
from app.devices.calibration import check_plausible
from app.devices.measured import read_rows, row_from_report
from app.errors import FieldError
from app.kits.causal_lm import open_model
from app.kits.runner import Kit, open_zip

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not

MiB = 1 << 20
PEAK_LIMIT = 48 * MiB  # per call, as tracemalloc counts Python's allocations
EXAMPLES = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=20), children, max_size=6)
    ),
    max_leaves=40,
)


@contextlib.contextmanager
def refused_or_read() -> Iterator[None]:
    """The call either succeeds or refuses with a FieldError naming a field; its peak memory
    stays under PEAK_LIMIT."""
    tracemalloc.start()
    try:
        yield
    except FieldError as exc:
        assert exc.field, exc
        assert exc.message, exc
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < PEAK_LIMIT, f"{peak / MiB:.0f} MiB"


def paths_of(doc, prefix=()) -> list[tuple]:
    """Every key path of a JSON document (object keys and list indices)."""
    found = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += paths_of(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            found += paths_of(value, (*prefix, i))
    return found


def replaced(doc, path: tuple, value):
    """`doc` with the value at `path` replaced (the whole document for the empty path)."""
    if not path:
        return value
    copy = json.loads(json.dumps(doc))
    node = copy
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return copy


def mutations(doc) -> st.SearchStrategy:
    """`doc` with one of its values replaced by random JSON."""
    return st.tuples(st.sampled_from(paths_of(doc)), json_values).map(lambda pv: replaced(doc, *pv))


def documents(doc) -> st.SearchStrategy[bytes]:
    """Bytes to hand a reader: random JSON, `doc` mutated, or random bytes."""
    as_json = (json_values | mutations(doc)).map(lambda v: json.dumps(v).encode())
    return as_json | st.binary(max_size=200)


# -- the documents ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return write_model(tmp_path_factory.mktemp("readers") / "qwen3", KIT_QWEN3, seed=7)


@pytest.fixture(scope="module")
def kit(checkpoint, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("readers-kit") / "kit.zip"
    args = ["--format", "mil", "--context", "16", "--prefill", "4"]
    assert main(["model", str(checkpoint), "-o", str(out), *args]) == 0
    return out


REPORT = report()  # a device check's report of a plausible measurement (test_hostile_calibrate)


def written(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@given(data=documents(KIT_QWEN3))
@EXAMPLES
def test_config_json(tmp_path, data):
    with refused_or_read():
        read_config(written(tmp_path, "config.json", data))


def checkpoint_with(checkpoint: Path, folder: Path, name: str, data: bytes) -> Path:
    """A checkpoint folder: `checkpoint`'s weights and config, its file `name` holding `data`."""
    folder.mkdir(exist_ok=True)
    for other in ("model.safetensors", "config.json"):
        if other != name and not (folder / other).exists():
            (folder / other).symlink_to(checkpoint / other)
    (folder / name).write_bytes(data)
    return folder


@given(data=documents(KIT_QWEN3))
@EXAMPLES
def test_a_checkpoint_folder_with_a_random_config(checkpoint, tmp_path, data):
    """The whole of open_model (config checked, then used), as a kit job's limits read it."""
    with refused_or_read():
        open_model(checkpoint_with(checkpoint, tmp_path / "folder", "config.json", data))


@given(data=documents({"eos_token_id": [2, 3], "bos_token_id": 1}))
@EXAMPLES
def test_generation_config(checkpoint, tmp_path, data):
    with refused_or_read():
        open_model(checkpoint_with(checkpoint, tmp_path / "gen", "generation_config.json", data))


@given(data=documents({"metadata": {}, "weight_map": {"model.norm.weight": "model.safetensors"}}))
@EXAMPLES
def test_shard_index(checkpoint, tmp_path, data):
    folder = tmp_path / "index"
    folder.mkdir(exist_ok=True)
    if not (folder / "model.safetensors").exists():
        (folder / "model.safetensors").symlink_to(checkpoint / "model.safetensors")
    with refused_or_read():
        open_checkpoint(written(folder, "model.safetensors.index.json", data))


@pytest.fixture(scope="module")
def kit_files(kit) -> dict[str, bytes]:
    files = open_zip(kit)
    return {name: files.read(name) for name in files}


@given(data=st.data())
@EXAMPLES
def test_kit_json(kit_files, data):
    meta = json.loads(kit_files["kit.json"])
    chosen = data.draw(documents(meta))
    with refused_or_read():
        Kit(kit_files | {"kit.json": chosen}, lazy=True)


@given(data=documents(REPORT))
@EXAMPLES
def test_device_check_report(tmp_path, data):
    with refused_or_read():
        report = read_json(written(tmp_path, "report.json", data), "report.json")
        check_plausible(row_from_report(report, "report.json"))


@given(data=documents([{"id": "r", **REPORT["calibration_row"]}]))
@EXAMPLES
def test_rows_file(tmp_path, data):
    with refused_or_read():
        read_rows(written(tmp_path, "rows.json", data))


# -- the zip reader ----------------------------------------------------------------------------------


def _read_all(path: Path) -> None:
    files = open_zip(path)
    for name in files:
        files.read(name, 1 << 20) if files.size(name) <= 1 << 20 else files[name]


@given(data=st.binary(max_size=4096))
@EXAMPLES
def test_random_bytes_at_the_zip_reader(tmp_path, data):
    with refused_or_read():
        _read_all(written(tmp_path, "random.zip", data))


def _mutated(original: bytes) -> st.SearchStrategy[bytes]:
    """`original` with a few bytes overwritten, or cut short, or with bytes spliced in."""
    size = len(original)

    def overwrite(edits: list[tuple[int, int]]) -> bytes:
        data = bytearray(original)
        for at, value in edits:
            data[at % size] = value
        return bytes(data)

    edits = st.lists(
        st.tuples(st.integers(0, size - 1), st.integers(0, 255)), min_size=1, max_size=8
    )
    cut = st.integers(0, size).map(lambda n: original[:n])
    splice = st.tuples(st.integers(0, size), st.binary(min_size=1, max_size=64)).map(
        lambda p: original[: p[0]] + p[1] + original[p[0] :]
    )
    return edits.map(overwrite) | cut | splice


@pytest.fixture(scope="module")
def kit_bytes(kit) -> bytes:
    return kit.read_bytes()


def _tail_heavy(original: bytes) -> Callable[[int], int]:
    """Most of a zip's structure is at its end (the central directory): mutate there more."""
    return lambda at: len(original) - 1 - (at % min(len(original), 4096))


@given(data=st.data())
@EXAMPLES
def test_mutated_kit_zips(kit_bytes, tmp_path, data):
    """A real kit with bytes overwritten (most in its central directory and local headers),
    cut short or spliced: the zip reader and the kit on top of it refuse or read it."""
    tail = _tail_heavy(kit_bytes)
    original = bytearray(kit_bytes)
    edits = data.draw(st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), max_size=6))
    for at, value in edits:
        original[tail(at)] = value
    chosen = data.draw(_mutated(bytes(original)))
    path = written(tmp_path, "mutated.zip", chosen)
    with refused_or_read():
        _read_all(path)
        kit = Kit.open(path)
        kit.generate([1, 2], max_new_tokens=2)
