"""The wait between a forget's two passes: it lasts until the turns that were queued when
the forget began have gone through both stages holding them, the boundary stage included,
whose entries are written after the forget began (the embed stage publishes them)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

from hivemem.domain.names import SessionName
from hivemem.pipeline.topology import Keys, Topology
from hivemem.service.forget import Forgetting
from hivemem.store.erasure import ErasureStore
from hivemem.testing import connect_fake, fake_server

NAME = SessionName("hot")


def _settle(erasure: ErasureStore, marks: dict[SessionName, str], most_s: float) -> None:
    owner: Any = SimpleNamespace(parts=SimpleNamespace(erasure=erasure))
    Forgetting.settle_between_passes(owner, marks, 0.0, most_s)


def test_the_second_pass_waits_for_a_boundary_worker_holding_a_run_read_before_it() -> None:
    client = connect_fake(fake_server())
    keys = Keys(partitions=1)
    topology = Topology(keys)
    turns, embedded = topology.embed.stream_for(0), topology.boundary.stream_for(0)
    client.xgroup_create(turns, topology.embed.group, id="0", mkstream=True)
    client.xgroup_create(embedded, topology.boundary.group, id="0", mkstream=True)
    client.xadd(turns, {"turn": "a turn"})
    client.xreadgroup(topology.embed.group, "e1", {turns: ">"})
    erasure = ErasureStore(client, keys)
    mark = erasure.last_entry_id(NAME)  # the forget begins
    # The embed worker publishes the turn (its entry id is after the mark) and acks it;
    # a boundary worker reads it and is still applying it when the first pass is done.
    client.xadd(embedded, {"turns": "the same turn"})
    client.xack(turns, topology.embed.group, mark)
    client.xreadgroup(topology.boundary.group, "b1", {embedded: ">"})
    assert erasure.pending_before(NAME, "embed", mark) == 0
    events: list[str] = []

    def boundary_done() -> None:
        time.sleep(0.3)
        events.append("boundary acked")
        entry = erasure.last_entry_id(NAME, "boundary")
        client.xack(embedded, topology.boundary.group, entry)

    worker = threading.Thread(target=boundary_done)
    worker.start()
    _settle(erasure, {NAME: mark}, most_s=20.0)
    events.append("second pass")
    worker.join()
    assert events == ["boundary acked", "second pass"]


def test_a_worker_that_never_acks_holds_the_second_pass_at_most_the_timeout() -> None:
    client = connect_fake(fake_server())
    keys = Keys(partitions=1)
    topology = Topology(keys)
    turns = topology.embed.stream_for(0)
    client.xgroup_create(turns, topology.embed.group, id="0", mkstream=True)
    client.xadd(turns, {"turn": "a turn"})
    client.xreadgroup(topology.embed.group, "killed", {turns: ">"})
    erasure = ErasureStore(client, keys)
    mark = erasure.last_entry_id(NAME)
    started = time.monotonic()
    _settle(erasure, {NAME: mark}, most_s=0.3)
    assert erasure.pending_before(NAME, "embed", mark) == 1  # still held: it gave up
    assert time.monotonic() - started < 10  # bounded (generously: a loaded machine)
