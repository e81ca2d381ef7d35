"""`lock_in_memory`: an embedded store's mapped file data locked (`mlock`), not its holes;
a refusal logged once with what to raise, and the store working on unlocked."""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import resource
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import structlog

from hivemem.config import VectorIndexSettings
from hivemem.domain.models import Role, Turn
from hivemem.providers.embedders import HashingEmbedder
from hivemem.store.vectors.base import TURNS
from hivemem.store.vectors.edge import EdgeVectorStore
from hivemem.store.vectors.memlock import MemoryLock, data_ranges, mapped_under

PAGE = mmap.PAGESIZE
EMB = HashingEmbedder(64)


def _may_lock(size: int) -> bool:
    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return os.geteuid() == 0 or soft == resource.RLIM_INFINITY or soft > size


def _locked_kb(folder: Path) -> int:
    """Locked kB of this process's mappings of files under `folder` (/proc/self/smaps)."""
    prefix = str(folder.resolve()) + os.sep
    total, inside = 0, False
    with open("/proc/self/smaps", encoding="utf-8") as fh:
        for line in fh:
            head = line.split(None, 5)
            if head and "-" in head[0] and len(head) >= 5:  # a mapping's first line
                inside = len(head) == 6 and head[5].startswith(prefix)
            elif inside and line.startswith("Locked:"):
                total += int(line.split()[1])
    return total


@pytest.fixture
def sparse_map(tmp_path: Path) -> Iterator[tuple[Path, mmap.mmap]]:
    """A 64-page file mapped whole: data in pages 0-1 and 40, holes elsewhere; the
    mapping is 80 pages (past the file's end, as the engine's chunked maps are)."""
    path = tmp_path / "seg" / "matrix.dat"
    path.parent.mkdir()
    with open(path, "wb") as fh:
        fh.write(os.urandom(2 * PAGE))
        fh.seek(40 * PAGE)
        fh.write(os.urandom(PAGE))
        fh.truncate(64 * PAGE)
    fd = os.open(path, os.O_RDWR)
    try:
        # A mapping longer than the file: mmap refuses that for a file, so map a file of
        # 80 pages and shrink it after (the tail is past the end, as in the engine).
        os.ftruncate(fd, 80 * PAGE)
        mapped = mmap.mmap(fd, 80 * PAGE)
        os.ftruncate(fd, 64 * PAGE)
    finally:
        os.close(fd)
    yield path, mapped
    mapped.close()


def _address(mapped: mmap.mmap) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(mapped))


def test_only_the_file_data_of_a_mapping_is_locked_not_its_holes_or_its_tail(
    tmp_path: Path, sparse_map: tuple[Path, mmap.mmap]
) -> None:
    _path, mapped = sparse_map
    start = _address(mapped)
    [mapping] = mapped_under(tmp_path)
    assert (mapping.start, mapping.end, mapping.offset) == (start, start + 80 * PAGE, 0)
    assert data_ranges(mapping) == [(start, start + 2 * PAGE),
                                    (start + 40 * PAGE, start + 41 * PAGE)]
    assert mapped_under(tmp_path / "seg" / "elsewhere") == []

    if not _may_lock(3 * PAGE):
        pytest.skip("this process may not lock 3 pages")
    locked = MemoryLock(tmp_path).lock()
    assert (locked.regions, locked.bytes, locked.refused) == (2, 3 * PAGE, None)
    assert _locked_kb(tmp_path) == 3 * PAGE // 1024
    again = MemoryLock(tmp_path)
    again.lock()
    assert again.lock().regions == 0  # nothing new to lock


class _RefusingLibc:
    def __init__(self, code: int) -> None:
        self.code = code
        self.calls = 0

    def mlock(self, addr: int, size: int) -> int:
        self.calls += 1
        ctypes.set_errno(self.code)
        return -1


def test_a_refusal_is_logged_once_with_what_to_raise_and_not_tried_again(
    tmp_path: Path, sparse_map: tuple[Path, mmap.mmap]
) -> None:
    libc = _RefusingLibc(errno.ENOMEM)
    lock = MemoryLock(tmp_path, libc=libc, interval_s=0)
    with structlog.testing.capture_logs() as logs:
        first = lock.lock()
        assert lock.lock().refused == first.refused
        assert lock.after_write() is None
    assert first.refused == "mlock: ENOMEM after 0 bytes" and first.regions == 0
    assert libc.calls == 1
    [event] = [e for e in logs if e["event"] == "store.memory_lock_refused"]
    assert event["log_level"] == "warning" and "ulimit -l" in event["hint"]
    assert "CAP_IPC_LOCK" in event["hint"]


def test_a_range_unmapped_meanwhile_is_skipped_not_a_refusal(
    tmp_path: Path, sparse_map: tuple[Path, mmap.mmap]
) -> None:
    _path, mapped = sparse_map
    maps = tmp_path / "maps"
    start = _address(mapped)
    maps.write_text(f"{start:x}-{start + 80 * PAGE:x} rw-s 00000000 fe:01 7 "
                    f"{tmp_path.resolve() / 'seg' / 'matrix.dat'}\n")

    class Unmapping(_RefusingLibc):
        def mlock(self, addr: int, size: int) -> int:
            maps.write_text("")  # the engine dropped the segment before the call
            return super().mlock(addr, size)

    libc = Unmapping(errno.ENOMEM)
    locked = MemoryLock(tmp_path, libc=libc, maps=maps).lock()
    assert (locked.refused, locked.regions) == (None, 0)
    assert libc.calls == 2  # both data ranges tried, neither refused


def test_after_write_locks_what_is_new_at_most_every_interval(
    tmp_path: Path, sparse_map: tuple[Path, mmap.mmap]
) -> None:
    if not _may_lock(4 * PAGE):
        pytest.skip("this process may not lock 4 pages")
    path, mapped = sparse_map
    lock = MemoryLock(tmp_path, interval_s=3600)
    assert lock.lock().regions == 2
    mapped[20 * PAGE:21 * PAGE] = os.urandom(PAGE)  # a hole written: data now
    mapped.flush()
    assert lock.after_write() is None  # not due
    lock.interval_s = 0
    relocked = lock.after_write()
    assert relocked is not None and relocked.bytes == PAGE
    assert _locked_kb(tmp_path) == 4 * PAGE // 1024
    assert lock.total_bytes == 4 * PAGE
    mapped.close()  # the engine drops the segment: its ranges are forgotten
    assert lock.lock().regions == 0 and lock.total_bytes == 0
    assert path.exists()


def _turns(n: int) -> list[Turn]:
    return [Turn(turn_id=f"t{i}", session_id="s1", role=Role.USER,
                 content=f"note {i} about topic {i % 7}", seq=i, token_count=4,
                 timestamp=datetime(2026, 1, 1, tzinfo=UTC)) for i in range(1, n + 1)]


def test_a_store_with_lock_in_memory_keeps_its_files_locked_across_an_index_build(
    tmp_path: Path,
) -> None:
    q = tmp_path / "q"
    settings = VectorIndexSettings(lock_in_memory=True, index_after_points=0,
                                   index_build_nice=0)
    with structlog.testing.capture_logs() as logs:
        store = EdgeVectorStore(q, EMB.dim, settings)
    try:
        turns = _turns(300)
        store.upsert_turns(turns, EMB.embed_documents([t.content for t in turns]))
        store.flush()
        assert store._memory is not None
        if not _may_lock(64 << 20):
            assert store._memory.refused is not None
            assert any(e["event"] == "store.memory_lock_refused" for e in logs)
            return
        assert store._memory.refused is None
        assert any(e["event"] == "store.memory_locked" for e in logs)
        assert _locked_kb(q) > 0
        with structlog.testing.capture_logs() as logs:
            store.build_index(TURNS)
        assert any(e["event"] == "store.memory_locked" for e in logs)  # the built shard
        assert _locked_kb(q) > 0
        hits = store.search_turns("s1", EMB.embed_query("note 5 about topic 5"), 5)
        assert hits and hits[0].turn_id == "t5"
    finally:
        store.close()
    assert _locked_kb(q) == 0  # unmapped with the shards


def test_a_store_without_it_locks_nothing(tmp_path: Path) -> None:
    store = EdgeVectorStore(tmp_path / "q", EMB.dim, VectorIndexSettings())
    try:
        turns = _turns(20)
        store.upsert_turns(turns, EMB.embed_documents([t.content for t in turns]))
        assert store._memory is None
        assert _locked_kb(tmp_path / "q") == 0
    finally:
        store.close()


def test_the_setting_reaches_the_embedded_store_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hivemem.config import Settings
    from hivemem.store.vectors.factory import open_vector_store

    monkeypatch.setenv("HIVEMEM_QDRANT__INDEX__LOCK_IN_MEMORY", "true")
    monkeypatch.setenv("HIVEMEM_QDRANT__PATH", str(tmp_path / "q"))
    store = open_vector_store(Settings().qdrant, EMB.dim)
    try:
        assert isinstance(store, EdgeVectorStore)
        assert store._memory is not None and store._memory.folder == tmp_path / "q"
    finally:
        store.close()
