"""`warm`: a built shard's files read once, most used first, within a budget, not the WAL."""

from __future__ import annotations

import os
from pathlib import Path

from hivemem.store.vectors.warm import warm


def _file(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    return path


def _on_disk(*paths: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in paths)


def test_every_file_but_the_wal_is_read(tmp_path: Path) -> None:
    seg = tmp_path / "segments" / "s1"
    files = [_file(seg / "vector_index-dense" / "links.bin", 10_000),
             _file(seg / "payload_storage" / "page_0.dat", 3_000_000),
             _file(seg / "vector_storage-dense" / "matrix.dat", 50_000)]
    _file(tmp_path / "wal" / "open-1", 200_000)
    warmed = warm(tmp_path, budget=1 << 40)
    assert warmed.files == 3
    assert warmed.bytes == _on_disk(*files)
    assert warmed.ms >= 0


def test_the_budget_keeps_what_every_search_reads(tmp_path: Path) -> None:
    seg = tmp_path / "segments" / "s1"
    graph = _file(seg / "vector_index-dense" / "links.bin", 40_000)
    int8 = _file(seg / "vector_storage-dense" / "quantized.data", 40_000)
    payload = _file(seg / "payload_storage" / "page_0.dat", 40_000)
    _file(seg / "vector_storage-dense" / "matrix.dat", 40_000)  # the float vectors: last
    warmed = warm(tmp_path, budget=_on_disk(graph, int8, payload))
    assert warmed.files == 3
    assert warmed.bytes == _on_disk(graph, int8, payload)
    assert warm(tmp_path, budget=0).files == 0


def test_an_empty_or_vanished_folder_warms_nothing(tmp_path: Path) -> None:
    assert warm(tmp_path).files == 0
    assert warm(tmp_path / "gone").files == 0
