"""Rules of the house that a grep can pin: Redis is spoken in store/ only."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "hivemem"
IMPORTS_REDIS = re.compile(r"^\s*(?:import redis\b|from redis\b)", re.MULTILINE)

# Outside store/, only these may import redis-py, each for a reason that is not data:
ALLOWED = {
    "pipeline/topology.py",  # redis.crc.key_slot: which cluster slot a hash tag lands in
    "runtime/child_server.py",  # pings and stops embedded mode's own child server
    "testing.py",  # starts throwaway servers for tests and benchmarks
}


def _importers() -> set[str]:
    return {
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if IMPORTS_REDIS.search(p.read_text(encoding="utf-8"))
    }


def test_redis_replies_are_read_in_store_only() -> None:
    outside = {path for path in _importers() if not path.startswith("store/")}
    assert outside == ALLOWED


def test_the_pattern_finds_the_store_modules() -> None:
    assert "store/redis.py" in _importers()
