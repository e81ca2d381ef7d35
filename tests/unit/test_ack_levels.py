"""Acknowledgement levels without a server: which level a call resolves to, the wait each
sends, and when its reply falls short (the servers are in
tests/integration/test_replica_ack.py)."""

from __future__ import annotations

import pytest

from hivemem.config import IngestSettings, Settings
from hivemem.errors import AckTimeout, StoreUnavailable, ValidationError
from hivemem.service.guard import ack_level
from hivemem.store.acked import AckWait


@pytest.mark.parametrize(("setting", "ack", "durable", "level"), [
    ("memory", None, None, "memory"),
    ("replica", None, None, "replica"),
    ("memory", "replica", None, "replica"),
    ("replica", "memory", None, "memory"),
    ("memory", None, True, "aof"),
    ("memory", "replica", True, "replica_aof"),
    ("aof", None, False, "aof"),
    ("replica_aof", "aof", True, "aof"),
])
def test_the_level_of_a_call(setting: str, ack: str | None, durable: bool | None,
                             level: str) -> None:
    settings = IngestSettings.model_validate({"ack": setting})
    assert ack_level(settings, ack, durable) == level


def test_durable_on_by_default_adds_the_aof() -> None:
    settings = IngestSettings.model_validate({"durable": True, "ack": "replica"})
    assert ack_level(settings, None, None) == "replica_aof"
    assert ack_level(settings, None, False) == "replica"


def test_a_bad_level_names_the_field() -> None:
    with pytest.raises(ValidationError) as caught:
        ack_level(IngestSettings(), "replicas", None)
    assert caught.value.field == "ack" and "replica_aof" in caught.value.message
    with pytest.raises(ValueError, match="ack"):
        Settings.model_validate({"ingest": {"ack": "disk"}})
    with pytest.raises(ValueError, match="ack_replicas"):
        Settings.model_validate({"ingest": {"ack_replicas": 0}})


def test_the_wait_each_level_sends_and_what_confirms_it() -> None:
    replica = AckWait("replica", 2, local_aof=False, replica_aof=False, timeout_ms=50)
    assert replica.command() == ("WAIT", 2, 50)
    assert replica.shortfall(2) is None and replica.shortfall(3) is None
    short = replica.shortfall(1)
    assert short is not None and (short.wanted, short.got) == ("2 replica(s)", "1")

    aof = AckWait("aof", 0, local_aof=True, replica_aof=False, timeout_ms=50)
    assert aof.command() == ("WAITAOF", 1, 0, 50)
    assert aof.shortfall([1, 0]) is None
    assert aof.shortfall([0, 0]) is not None

    both = AckWait("replica_aof", 1, local_aof=True, replica_aof=True, timeout_ms=50)
    assert both.command() == ("WAITAOF", 1, 1, 50)
    assert both.shortfall([1, 1]) is None
    missing = both.shortfall([1, 0])
    assert missing is not None and "1 replica AOF" in missing.wanted
    # appendfsync always on the master: its own AOF needs no wait, the replicas' does.
    replicas_only = AckWait("replica_aof", 1, local_aof=False, replica_aof=True,
                            timeout_ms=50)
    assert replicas_only.command() == ("WAITAOF", 0, 1, 50)


def test_the_timeout_error_says_the_turn_may_exist() -> None:
    error = AckTimeout("replica", "1 replica(s)", "0", 1000, ["a", "b", "c", "d", "e"])
    assert isinstance(error, StoreUnavailable)
    text = str(error)
    assert "may exist" in text and "a, b, c (+2)" in text and "same turn_id" in text
