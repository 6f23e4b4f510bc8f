"""The artifact store on a real directory: bounded by bytes with least-recently-used eviction,
atomic publishes, corruption caught by the digest, and an index that survives a restart."""

from __future__ import annotations

import hashlib
import os
import time

import pytest

from app.cache.store import STALE_AFTER_S, ContentStore


def _put(store: ContentStore, key: str, size: int, **meta: str) -> None:
    data = key.encode() * (size // len(key))
    tmp = store.temp_path()
    tmp.write_bytes(data)
    store.publish(key, tmp, {"digest": "sha256:" + hashlib.sha256(data).hexdigest(), **meta})


def _key(i: int) -> str:
    return f"{i:02d}" + "k" * 62


def test_lru_eviction_by_bytes(tmp_path):
    evicted = []
    store = ContentStore(tmp_path, max_bytes=5_000, suffix=".zip", on_evict=evicted.append)
    for i in range(4):
        _put(store, _key(i), 1_000)
    assert store.get(_key(0)) is not None  # touch 0: now 1 is the least recently used
    _put(store, _key(4), 1_000)
    _put(store, _key(5), 1_000)
    assert store.total_bytes <= 5_000
    assert _key(1) not in store and _key(0) in store and _key(5) in store
    assert not store.data_path(_key(1)).exists() and not store.meta_path(_key(1)).exists()
    assert sum(evicted) >= 1
    # The running total agrees with what is on disk.
    on_disk = sum(p.stat().st_size for p in tmp_path.glob("??/*") if p.is_file())
    assert store.total_bytes == on_disk


def test_an_entry_larger_than_the_bound_still_publishes(tmp_path):
    store = ContentStore(tmp_path, max_bytes=100, suffix=".zip")
    _put(store, _key(1), 1_000)
    assert store.get(_key(1)) is not None
    _put(store, _key(2), 1_000)
    assert _key(1) not in store and _key(2) in store


def test_publish_leaves_no_temp_files(tmp_path):
    store = ContentStore(tmp_path, max_bytes=1 << 20, suffix=".zip")
    for i in range(3):
        _put(store, _key(i), 500)
    assert list(store.tmp_dir.iterdir()) == []


def test_corruption_is_detected_and_the_entry_dropped(tmp_path):
    corrupt = []
    store = ContentStore(tmp_path, 1 << 20, ".zip", on_corrupt=lambda: corrupt.append(1))
    _put(store, _key(7), 2_000)
    path = store.data_path(_key(7))
    data = bytearray(path.read_bytes())
    data[10] ^= 1
    path.write_bytes(bytes(data))
    # present, but its file changed: not served unverified, and it must be verified
    assert store.verified(_key(7)) is None and _key(7) in store
    assert store.verify(_key(7)) is None
    assert corrupt == [1] and not path.exists() and _key(7) not in store


def test_restart_keeps_entries_and_their_order(tmp_path):
    store = ContentStore(tmp_path, 4_000, ".zip")
    for i in range(3):
        _put(store, _key(i), 1_000)
    # Make entry 0 the most recently used on disk (the clock that survives restarts).
    later = store.data_path(_key(0)).stat().st_atime_ns + 10**12
    os.utime(store.data_path(_key(0)), ns=(later, store.data_path(_key(0)).stat().st_mtime_ns))
    (store.tmp_dir / "stale.part").write_bytes(b"half a zip")
    orphan = store.data_path(_key(9))
    orphan.parent.mkdir(exist_ok=True)
    orphan.write_bytes(b"no sidecar")
    # A crashed writer's leftovers, from hours ago (recent ones may be another process's work).
    hours_ago = int((store.tmp_dir.stat().st_mtime - 7200) * 1e9)
    for leftover in (store.tmp_dir / "stale.part", orphan):
        os.utime(leftover, ns=(hours_ago, hours_ago))
    old = time.time() - 2 * STALE_AFTER_S  # a crashed writer's debris...
    for debris in (store.tmp_dir / "stale.part", orphan):
        os.utime(debris, (old, old))
    # ...while fresh ones may be another process's upload or publish in progress (shared volume).
    (store.tmp_dir / "receiving.part").write_bytes(b"arriving")
    publishing = store.data_path(_key(8))
    publishing.parent.mkdir(exist_ok=True)
    publishing.write_bytes(b"sidecar comes next")

    again = ContentStore(tmp_path, 4_000, ".zip")
    assert {_key(i) for i in range(3)} <= set(again._lru)
    assert list(again._lru)[-1] == _key(0)
    assert not (again.tmp_dir / "stale.part").exists() and not orphan.exists()
    assert (again.tmp_dir / "receiving.part").exists() and publishing.exists()
    assert again.get(_key(1)) is not None  # verified against its recorded digest
    _put(again, _key(3), 1_000)
    assert _key(2) not in again  # the least recently used after the restart went first


def test_a_publish_that_fails_leaves_nothing_behind(tmp_path):
    store = ContentStore(tmp_path, max_bytes=1 << 20, suffix=".zip")
    (tmp_path / _key(1)[:2]).write_bytes(b"")  # a file where the entry's directory would go
    src = store.temp_path()
    src.write_bytes(b"zip")
    with pytest.raises(OSError):
        store.publish(_key(1), src, {"digest": "sha256:" + hashlib.sha256(b"zip").hexdigest()})
    assert [p.name for p in store.tmp_dir.iterdir()] == [src.name]  # no sidecar left behind
    assert _key(1) not in store


def test_a_pool_is_bounded_on_its_own_and_evicts_only_its_own(tmp_path):
    """Model kits (the `kits` pool): a kit larger than the kernels' bound neither evicts them nor
    is evicted for them; kits beyond their own bound evict the oldest kits; after a restart the
    pools are counted as before."""
    store = ContentStore(tmp_path, 3_500, ".zip", pools={"kits": 6_000})
    kernels = [_key(i) for i in range(2)]
    for key in kernels:
        _put(store, key, 1_000)
    _put(store, _key(10), 4_000, pool="kits")  # alone over the kernels' 3,500
    assert all(k in store for k in kernels) and _key(10) in store
    _put(store, _key(11), 2_500, pool="kits")
    _put(store, _key(12), 2_500, pool="kits")  # kits now over 6,000: the oldest kit goes
    assert _key(10) not in store and _key(11) in store and _key(12) in store
    assert all(k in store for k in kernels)
    reopened = ContentStore(tmp_path, 3_500, ".zip", pools={"kits": 6_000})
    _put(reopened, _key(2), 1_000)
    _put(reopened, _key(3), 1_000)  # kernels over 3,500: the oldest kernel goes, no kit
    assert kernels[0] not in reopened and kernels[1] in reopened
    assert _key(11) in reopened and _key(12) in reopened
    on_disk = sum(p.stat().st_size for p in tmp_path.glob("??/*") if p.is_file())
    assert reopened.total_bytes == on_disk
