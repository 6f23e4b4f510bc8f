"""Hostile kit zips at `ane-kernels generate` (and Kit.open, which the device-check job uses):
malformed kit.json files and central directories, zips whose members lie about their sizes or
inflate to gigabytes, members missing from kit.json or kit.json listing none. Each is exit 2
with a message naming the zip's file and key, never exit 1 with a traceback; a zip bomb is
refused without being inflated."""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from kit_support import KIT_QWEN3, write_model

from app.cli import main
from app.errors import FieldError
from app.kits.runner import Kit

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not

REPO = Path(__file__).resolve().parent.parent
MiB = 1 << 20
CENTRAL = b"PK\x01\x02"
LOCAL = b"PK\x03\x04"


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Path:
    """A real kit (mil, kv io) of a small Qwen3: what every case below corrupts."""
    root = tmp_path_factory.mktemp("hostile-kits")
    folder = write_model(root / "qwen3", KIT_QWEN3, seed=5)
    out = root / "kit.zip"
    args = ["--format", "mil", "--context", "16", "--prefill", "4"]
    assert main(["model", str(folder), "-o", str(out), *args]) == 0
    return out


def members(kit: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(kit) as zf:
        return {i.filename: zf.read(i) for i in zf.infolist()}


def rezip(files: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", method) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return out.getvalue()


def with_meta(change: Callable[[dict], object]) -> Callable[[dict[str, bytes]], bytes]:
    """A case: kit.json changed by `change` (which edits the dict in place, or returns a whole
    replacement), the rest of the kit as it is."""

    def make(files: dict[str, bytes]) -> bytes:
        meta = json.loads(files["kit.json"])
        replaced = change(meta)
        text = (
            replaced
            if isinstance(replaced, bytes)
            else json.dumps(meta if replaced is None else replaced).encode()
        )
        return rezip(files | {"kit.json": text})

    return make


def first_decoder(meta: dict) -> dict:
    return next(p for p in meta["programs"] if p["role"] == "decoder")


def _central(data: bytes, name: str) -> int:
    """Where the central directory record of member `name` starts."""
    at = data.find(CENTRAL)
    while at >= 0:
        length = struct.unpack_from("<H", data, at + 28)[0]
        if data[at + 46 : at + 46 + length] == name.encode():
            return at
        at = data.find(CENTRAL, at + 4)
    raise LookupError(name)


def patched(name: str, **fields: int) -> Callable[[dict[str, bytes]], bytes]:
    """A case: the zip rewritten as stored, then member `name`'s central record (and, for the
    method, its local header too) patched: method, csize, usize, offset, flags."""
    offsets = {"flags": (8, "H"), "method": (10, "H"), "csize": (20, "I"), "usize": (24, "I")}
    offsets["offset"] = (42, "I")

    def make(files: dict[str, bytes]) -> bytes:
        data = bytearray(rezip(files, zipfile.ZIP_STORED))
        at = _central(bytes(data), name)
        for key, value in fields.items():
            where, kind = offsets[key]
            struct.pack_into(f"<{kind}", data, at + where, value)
            if key in ("method", "flags"):
                local = struct.unpack_from("<I", data, at + 42)[0]
                struct.pack_into(f"<{kind}", data, local + where - 2, value)
        return bytes(data)

    return make


def overlapping(files: dict[str, bytes]) -> bytes:
    """A member whose declared bytes run on into the next member's: the overlapping-file zip
    bomb's shape (each member's own local header intact)."""
    size = len(files["embeddings.f16"]) + 100
    return patched("embeddings.f16", csize=size, usize=size)(files)


def wrong_local_name(files: dict[str, bytes]) -> bytes:
    data = bytearray(rezip(files, zipfile.ZIP_STORED))
    at = data.find(LOCAL)  # the first local header
    data[at + 30] ^= 0x20  # its name's first letter, in the local header only
    return bytes(data)


# (what, how the zip is made from the kit's files, words the message holds)
CASES: list[tuple[str, Callable[[dict[str, bytes]], bytes], str]] = [
    ("files as a list", with_meta(lambda m: m.update(files=list(m["files"]))), "files"),
    ("files empty", with_meta(lambda m: m.update(files={})), "not in kit.json's files"),
    ("a digest not hex", with_meta(lambda m: m["files"].update({"rope.f16": "x"})), "files"),
    (
        "embedding shape 10^9",
        with_meta(lambda m: m["embeddings"].update(shape=[10**9, 32])),
        "embeddings",
    ),
    (
        "cache shape 10^9",
        with_meta(lambda m: first_decoder(m)["kv_cache"].update(shape=[1, 10**9, 16, 16])),
        "kv_cache",
    ),
    ("negative prefill", with_meta(lambda m: m.update(prefill=-4)), "prefill"),
    ("prefill a string", with_meta(lambda m: m.update(prefill="4")), "prefill"),
    ("prefill over context", with_meta(lambda m: m.update(prefill=64)), "prefill"),
    ("context 0", with_meta(lambda m: m.update(context=0)), "context"),
    ("programs a number", with_meta(lambda m: m.update(programs=5)), "programs"),
    ("programs empty", with_meta(lambda m: m.update(programs=[])), "programs"),
    ("a role unknown", with_meta(lambda m: first_decoder(m).update(role="tail")), "role"),
    ("layers reversed", with_meta(lambda m: first_decoder(m).update(layers=[1, 0])), "programs"),
    (
        "layers past the model",
        with_meta(lambda m: first_decoder(m).update(layers=[0, 7])),
        "layers",
    ),
    (
        "vocab past the model",
        with_meta(lambda m: m["programs"][-1].update(vocab=[0, 9999])),
        "vocab",
    ),
    ("kit_version 4", with_meta(lambda m: m.update(kit_version=4)), "kit_version"),
    (
        "nested 50,000 deep",
        with_meta(
            lambda m: m.update(x=0) or ('{"a": ' + "[" * 50_000 + "]" * 50_000 + "}").encode()
        ),
        "deep",
    ),
    ("not JSON", with_meta(lambda m: b"{kit"), "not valid JSON"),
    (
        "eos a string",
        with_meta(lambda m: m["special_tokens"].update(eos_token_id="2")),
        "eos_token_id",
    ),
    ("rope shape wrong", with_meta(lambda m: m["rope"].update(shape=[2, 99, 16])), "rope"),
    (
        "program path elsewhere",
        with_meta(lambda m: first_decoder(m).update(path="nowhere")),
        "nowhere",
    ),
    ("no kit.json", lambda f: rezip({k: v for k, v in f.items() if k != "kit.json"}), "kit.json"),
    ("a member not listed", lambda f: rezip(f | {"extra.bin": b"x"}), "extra.bin"),
    (
        "a listed member missing",
        lambda f: rezip({k: v for k, v in f.items() if k != "rope.f16"}),
        "rope.f16",
    ),
    ("a header offset past the end", patched("rope.f16", offset=1 << 30), "rope.f16"),
    ("an LZMA member", patched("rope.f16", method=14), "compression method 14"),
    (
        "a stored size of 4 GiB",
        patched("rope.f16", csize=(1 << 32) - 2, usize=(1 << 32) - 2),
        "rope.f16",
    ),
    ("an encrypted member", patched("rope.f16", flags=1), "encrypted"),
    ("overlapping members", overlapping, "overlap"),
    ("a local header naming another file", wrong_local_name, "local header"),
    ("truncated", lambda f: rezip(f)[: len(rezip(f)) // 2], "kit zip"),
    ("not a zip", lambda f: b"nothing like a zip", "kit zip"),
    ("a name with ..", lambda f: rezip(f | {"../evil": b"x"}), "relative path"),
]


@pytest.mark.parametrize(("what", "make", "words"), CASES, ids=[c[0] for c in CASES])
def test_a_malformed_kit_is_exit_2_naming_what(kit, tmp_path, capsys, what, make, words):
    bad = tmp_path / "bad.kit.zip"
    bad.write_bytes(make(members(kit)))
    code = main(["generate", str(bad), "--prompt-ids", "1,2", "--max-new-tokens", "2"])
    err = capsys.readouterr().err
    assert code == 2, (code, err)
    assert err.startswith("error: ") and words in err, err
    with pytest.raises(FieldError):  # the device-check job and the Python API: the same refusal
        Kit.open(bad)


def test_the_kit_itself_runs(kit, capsys):
    assert main(["generate", str(kit), "--prompt-ids", "1,2", "--max-new-tokens", "2"]) == 0


def _bomb(files: dict[str, bytes], name: str, size: int, declared: int | None = None) -> bytes:
    """The kit with member `name` replaced by `size` zero bytes, deflated (about 1 KB per MB),
    its central directory declaring `declared` bytes (default: the truth) with their CRC."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, data in files.items():
            if member != name:
                zf.writestr(member, data)
        info = zipfile.ZipInfo(name)
        info.compress_type = zipfile.ZIP_DEFLATED
        with zf.open(info, "w") as f:
            block = bytes(MiB)
            for _ in range(size // MiB):
                f.write(block)
    data = bytearray(out.getvalue())
    if declared is not None:
        at = _central(bytes(data), name)
        struct.pack_into("<I", data, at + 16, zlib.crc32(bytes(declared)))
        struct.pack_into("<I", data, at + 24, declared)
    return bytes(data)


# `ane-kernels generate` as its own process, writing its peak RSS (VmHWM, which starts afresh
# at exec: ru_maxrss would include the forked test process's own memory) to argv[1] at exit.
_LAUNCH = """
import atexit, runpy, sys
out = sys.argv.pop(1)
def peak():
    status = open("/proc/self/status").read()
    open(out, "w").write(next(l for l in status.splitlines() if l.startswith("VmHWM:")).split()[1])
atexit.register(peak)
sys.argv[0] = "ane-kernels"
runpy.run_module("app.cli", run_name="__main__")
"""


def _generate_rss(path: Path) -> tuple[int, str, int]:
    """`ane-kernels generate` on `path` as its own process: exit code, stderr, peak RSS."""
    peak = path.with_suffix(".peak")
    done = subprocess.run(
        [sys.executable, "-c", _LAUNCH, str(peak), "generate", str(path), "--prompt-ids", "1,2"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.returncode, done.stderr, int(peak.read_text()) * 1024


@pytest.mark.parametrize(
    ("name", "size", "declared", "words"),
    [
        ("tokenizer.json", 1 << 30, None, "over the limit"),
        ("kit.json", 1 << 30, None, "over the limit"),
        ("tokenizer.json", 512 * MiB, 1000, "inflates past"),
    ],
    ids=["tokenizer.json of 1 GiB", "kit.json of 1 GiB", "tokenizer.json claiming 1000 bytes"],
)
def test_a_zip_bomb_is_refused_without_inflating_it(kit, tmp_path, name, size, declared, words):
    """Finding 8: a zip of about a megabyte whose member inflates to gigabytes: refused, the
    process's peak memory far below the member's size."""
    bomb = tmp_path / "bomb.kit.zip"
    bomb.write_bytes(_bomb(members(kit), name, size, declared))
    assert bomb.stat().st_size < 2 * MiB
    code, err, peak = _generate_rss(bomb)
    assert code == 2 and "Traceback" not in err, err
    assert name in err and words in err, err
    assert peak < 400 * MiB, f"peak RSS {peak / MiB:.0f} MiB"
