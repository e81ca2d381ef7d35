"""A recall's first Redis read carries the slot table's version (`queue_version`): the table
costs no round trip of its own, and the recall is the one the table's own read gives."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from hivemem import MemoryClient
from hivemem.store.currency import SlotTableStore

_NOW = "When is the deploy window now?"  # a question about now: the table is read


def _changed_deploy(client: MemoryClient, drain: Callable[[], None]) -> None:
    client.ingest("s", "user", "The deploy window is Tuesday at noon.")
    client.ingest("s", "user", "Change of plan: the deploy window is Thursday at noon.")
    drain()


def _dump(client: MemoryClient) -> list[dict[str, Any]]:
    result = client.recall("s", _NOW, token_budget=200, explain=True)
    return [i.model_dump(mode="json") for i in [*result.items, *result.excluded]]


def test_the_slot_table_rides_in_the_first_read(
    pipeline: tuple[MemoryClient, Callable[[], None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, drain = pipeline
    _changed_deploy(client, drain)
    read: list[tuple[Any, ...]] = []
    view_at = SlotTableStore.view_at

    def watched(self: SlotTableStore, name: Any, replies: Any) -> Any:
        read.append(tuple(replies))
        return view_at(self, name, replies)

    def refused(self: SlotTableStore, name: Any) -> Any:
        raise AssertionError("the slot table read in a round trip of its own")

    riding = _dump(client)  # (the view kept from here on: both reads below find it)
    monkeypatch.setattr(SlotTableStore, "view_at", watched)
    monkeypatch.setattr(SlotTableStore, "send_view", refused)
    assert _dump(client) == riding
    assert len(read) == 1 and read[0][1] > 0, "the table's version read, a non-empty table"
    monkeypatch.undo()

    # A slot table on a client of its own: read apart, the same recall.
    monkeypatch.setattr(SlotTableStore, "client", property(lambda self: object()))
    sent: list[Any] = []
    send_view = SlotTableStore.send_view

    def counted(self: SlotTableStore, name: Any) -> Any:
        sent.append(name)
        return send_view(self, name)

    monkeypatch.setattr(SlotTableStore, "send_view", counted)
    assert _dump(client) == riding
    assert len(sent) == 1
