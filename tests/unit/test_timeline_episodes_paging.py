"""A timeline page reads the session's episodes a few at a time from the newest (then twice
as many each read): every close still shows once, in order, across reads and pages."""

from __future__ import annotations

from collections.abc import Callable

from hivemem import MemoryClient
from hivemem.domain.timeline import TimelineEvent

EPISODES = 19  # more than the first reads (4, 8) together: the third read is reached


def test_every_episode_close_shows_once_in_order_across_pages(
    pipeline: tuple[MemoryClient, Callable[[], None]],
) -> None:
    client, drain = pipeline
    for e in range(EPISODES):
        client.ingest_many([{"session_id": "eps", "role": "user",
                             "content": f"episode {e} turn {i}"} for i in range(2)])
        drain()
        client.close_episode("eps")
        drain()
    everything = client.admin.timeline(["eps"], kinds=["turn", "episode"])
    assert sum(e.kind == "episode" for e in everything) == EPISODES
    for limit in (3, 10, 100):
        out: list[TimelineEvent] = []
        cursor = None
        while True:
            page = client.admin.timeline_page(["eps"], kinds=["turn", "episode"],
                                              limit=limit, cursor=cursor)
            out = page.events + out
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert out == everything, limit
