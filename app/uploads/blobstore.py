"""Uploaded weight tensors, stored by the digest of their canonical bytes.

An upload is published by renaming its spool file, header and all, so a 200 MB tensor is never
copied: the sidecar records where its bytes start, their dtype and shape, and the build maps it.
The store may be shared with other processes (the API and farm workers on one data volume): a
blob another process stored is found, checked and indexed on first use.

A safetensors file of several tensors (a checkpoint, or a shard of one) is stored whole, by the
digest of the file. A weight names one of its tensors as `sha256:<file digest>#<tensor name>`:
that tensor is converted to fp16 (app/checkpoints: F16, BF16, F32; overflow refused) and stored
as a blob of its own, which is what the build maps and what identifies the weight in cache keys.

Tensors and whole files share the digest space: the same bytes may be posted as a raw tensor
and uploaded as a file (a config.json, say), in either order. They are two entries of the one
store, a tensor under the digest's hex and a file under `<hex>-file`, so neither shadows the
other. (A file stored before files had keys of their own is still found under the bare hex,
until a tensor of the same bytes takes the key.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from app.cache.faults import BLOB_STORE, storage_errors
from app.cache.store import ContentStore, StoredEntry
from app.checkpoints.convert import to_fp16
from app.checkpoints.files import Mapped, looks_like_safetensors, read_header
from app.core.digest import file_digest, hex_of
from app.core.files import discard
from app.errors import RequestError
from app.request import KernelRequest, WeightRef
from app.tensors.headers import TensorFile, sniff, with_digest

CHECKPOINT = "safetensors"  # a stored file of many tensors, not one tensor
FILE = "file"  # any other whole file (a checkpoint's config or tokenizer), by its bytes' digest
_WHOLE = (CHECKPOINT, FILE)
_FILE_KEY = "-file"  # what a whole file's key adds to its digest's hex


def _is_file(entry: StoredEntry | None) -> bool:
    return entry is not None and entry.meta.get("source") in _WHOLE


class BlobStore:
    def __init__(self, root: Path, max_bytes: int, **hooks):
        self.store = ContentStore(root, max_bytes, ".tensor", **hooks)
        self._converted: dict[tuple[str, str], str] = {}  # (file digest, tensor) -> fp16 blob

    def new_spool_path(self) -> Path:
        return self.store.temp_path()

    def __contains__(self, digest: str) -> bool:
        """Whether a tensor or a whole file of this digest is stored (no file is read)."""
        hex_ = hex_of(digest)
        return hex_ is not None and (hex_ in self.store or hex_ + _FILE_KEY in self.store)

    def has_tensor(self, digest: str) -> bool:
        """Whether a tensor of this digest is stored (checked: blocking)."""
        return self.get(digest) is not None

    def put(self, tensor: TensorFile) -> TensorFile:
        """Publish a sniffed upload (its file must be in the store's tmp dir). Blocking: the
        digest is a pass over the file; run it off the event loop. A full or unwritable store
        raises its storage fault."""
        with storage_errors(BLOB_STORE, self.store.root, tensor.nbytes):
            return self._put(tensor)

    def _put(self, tensor: TensorFile) -> TensorFile:
        if not tensor.digest:
            tensor = with_digest(tensor)
        key = hex_of(tensor.digest)
        assert key is not None
        existing = self.store.get(key)
        if existing is not None and not _is_file(existing):  # a file of old takes no tensor's key
            tensor.path.unlink(missing_ok=True)
            return _tensor(existing)
        entry = self.store.publish(
            key,
            tensor.path,
            {
                "digest": tensor.digest,
                "offset": tensor.offset,
                "length": tensor.nbytes,
                "dtype": tensor.dtype.name,
                "shape": list(tensor.shape),
                "source": tensor.source,
            },
        )
        return _tensor(entry)

    def get(self, digest: str) -> TensorFile | None:
        """The stored tensor (its digest checked once per file version), or None (also for a
        checkpoint file: see `checkpoint`). Blocking."""
        hex_ = hex_of(digest)
        entry = self.store.get(hex_) if hex_ else None
        return None if entry is None or _is_file(entry) else _tensor(entry)

    # -- checkpoint files -----------------------------------------------------------------------
    def put_checkpoint(self, path: Path, tensors: int) -> tuple[str, int, bool]:
        """Publish an uploaded safetensors file of several tensors, whole; (digest, size,
        whether it was stored already). Blocking: the digest is a pass over the file."""
        digest = file_digest(path)
        key = _file_key(digest)
        size = path.stat().st_size
        if self.file(digest) is not None:
            path.unlink(missing_ok=True)
            return digest, size, True
        meta = {
            "digest": digest,
            "dtype": CHECKPOINT,
            "shape": [],
            "source": CHECKPOINT,
            "tensors": tensors,
        }
        self.store.publish(key, path, meta)
        return digest, size, False

    def put_file(self, path: Path, digest: str) -> dict:
        """Publish a whole uploaded file whose digest is known (checked by the caller): a
        safetensors file as a checkpoint (its header checked), anything else as a plain file.
        Its description, as GET /v1/blobs/{digest} gives it. Blocking."""
        key = _file_key(digest)
        meta: dict = {"digest": digest, "dtype": FILE, "shape": [], "source": FILE}
        if looks_like_safetensors(path):
            try:
                tensors = len(read_header(path, "file", "the uploaded safetensors file"))
            except BaseException:
                discard(path)
                raise
            meta |= {"dtype": CHECKPOINT, "source": CHECKPOINT, "tensors": tensors}
        if self.file(digest) is None:
            with storage_errors(BLOB_STORE, self.store.root, path.stat().st_size):
                self.store.publish(key, path, meta)
        else:
            discard(path)
        entry = self.file(digest)
        assert entry is not None
        return describe_file(entry)

    def file(self, digest: str) -> StoredEntry | None:
        """A stored whole file (a checkpoint, or a plain file), checked once, or None. Blocking."""
        hex_ = hex_of(digest)
        if hex_ is None:
            return None
        entry = self.store.get(hex_ + _FILE_KEY)
        if entry is None:
            legacy = self.store.get(hex_)
            entry = legacy if _is_file(legacy) else None
        return entry

    def file_path(self, digest: str) -> Path | None:
        """Where a stored whole file is (see `file`), or None. Blocking."""
        entry = self.file(digest)
        return None if entry is None else entry.path

    def checkpoint(self, digest: str) -> StoredEntry | None:
        """A stored checkpoint file (its digest checked once), or None. Blocking."""
        entry = self.file(digest)
        return entry if entry is not None and entry.meta.get("source") == CHECKPOINT else None

    def checkpoint_tensor(self, field: str, digest: str, name: str) -> TensorFile:
        """Tensor `name` of checkpoint file `digest`, in fp16, as a blob of its own (converted
        once per store and process). Blocking."""
        known = self._converted.get((digest, name))
        if known is not None and (tensor := self.get(known)) is not None:
            return tensor
        entry = self.checkpoint(digest)
        if entry is None:
            raise RequestError(
                field,
                f"no checkpoint blob {digest}; upload the safetensors file "
                "with POST /v1/blobs first",
                title="Unknown blob",
            )
        found = read_header(entry.path, field, f"checkpoint blob {digest}").get(name)
        if found is None:
            raise RequestError(field, f"checkpoint blob {digest} has no tensor {name!r}")
        try:
            with Mapped() as mapped:
                converted = to_fp16(found, mapped)
        except RequestError as exc:
            raise RequestError(field, exc.message, title=exc.title) from None
        if converted.overflow:
            raise RequestError(
                field,
                f"tensor {name!r}: {converted.overflow} values beyond the "
                "fp16 range (±65504) would become infinite",
                title="fp16 overflow",
                overflow={name: converted.overflow},
            )
        spooled = self._spool_array(converted.values, field)
        try:
            tensor = self.put(spooled)
        except BaseException:
            discard(spooled.path)
            raise
        self._converted[(digest, name)] = tensor.digest
        return tensor

    def _whole_file(self, ref: WeightRef) -> TensorFile | None:
        """A weight that is a whole stored file's bytes (uint8, one axis: an ONNX model's
        files), or None."""
        if ref.dtype != "uint8" or len(ref.shape) != 1:
            return None
        entry = self.file(ref.digest)
        return None if entry is None else _file_tensor(entry, ref.digest)

    def keep_weights(self, request: KernelRequest) -> KernelRequest:
        """The request with every weight in the store, for a job: a queued job outlives the
        request whose spool files hold its file parts (moved in), and its record shows weights
        by digest, so inline values are stored too: a job lost with its broker can be submitted
        again from its record as it is. Blocking."""
        if not any(w.spooled or w.inline is not None for w in request.weights.values()):
            return request
        return request.with_weights({n: self._keep(w) for n, w in request.weights.items()})

    def _keep(self, weight: WeightRef) -> WeightRef:
        if weight.inline is not None:
            if not self.has_tensor(weight.digest):
                self._put_array(weight.inline, weight.digest)
            return weight  # the record keeps its values too: a worker needs no file for them
        if not weight.spooled or weight.file is None:
            return weight
        return WeightRef(weight.digest, weight.dtype, weight.shape, file=self.put(weight.file))

    def _spool_array(self, array: np.ndarray, field: str) -> TensorFile:
        """`array` as a hashed .npy spool file, ready for `put`; nothing is left if writing fails."""
        path = self.new_spool_path()
        try:
            with storage_errors(BLOB_STORE, self.store.root, array.nbytes), open(path, "wb") as f:
                np.save(f, array, allow_pickle=False)
            return with_digest(sniff(path, field))
        except BaseException:
            discard(path)
            raise

    def _put_array(self, array: np.ndarray, digest: str) -> None:
        tensor = self._spool_array(array, "weights")
        if tensor.digest != digest:  # cannot happen for canonical arrays; never store a lie
            discard(tensor.path)
            raise ValueError(f"an inline weight hashed to {tensor.digest}, expected {digest}")
        self.put(tensor)

    def locate(self, request: KernelRequest) -> KernelRequest:
        """The request with every weight known only by digest mapped from this store. Blocking."""
        if all(w.located for w in request.weights.values()):
            return request
        located = {}
        for name, ref in request.weights.items():
            if not ref.located:
                tensor = self.get(ref.digest) or self._whole_file(ref)
                if tensor is None:
                    raise RequestError(
                        f"weights.{name}",
                        f"blob {ref.digest} is not in the blob store this worker shares with the "
                        "API (evicted since the request, or the worker is not on the shared data "
                        "volume)",
                    )
                ref = WeightRef(ref.digest, ref.dtype, ref.shape, file=tensor)
            located[name] = ref
        return request.with_weights(located)


def _file_key(digest: str) -> str:
    hex_ = hex_of(digest)
    assert hex_ is not None
    return hex_ + _FILE_KEY


def _file_tensor(entry: StoredEntry, digest: str) -> TensorFile:
    """A whole stored file as the byte tensor a request names it by (an ONNX model's files)."""
    size = entry.path.stat().st_size
    return TensorFile(entry.path, 0, np.dtype("u1"), (size,), "raw", digest)


def describe_file(entry: StoredEntry) -> dict:
    """A whole stored file as GET /v1/blobs/{digest} describes it."""
    meta = entry.meta
    return {
        "digest": meta["digest"],
        "dtype": meta["dtype"],
        "shape": [],
        "bytes": entry.path.stat().st_size,
        "tensors": meta.get("tensors"),
    }


def _tensor(entry: StoredEntry) -> TensorFile:
    m = entry.meta
    return TensorFile(
        entry.path,
        int(m["offset"]),
        np.dtype(m["dtype"]).newbyteorder("<"),
        tuple(m["shape"]),
        m["source"],
        m["digest"],
    )
