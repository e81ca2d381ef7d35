"""One behavioural suite (`support.behaviour`), three ways of connecting
(`support.connections`): the embedded client, the server-mode client on a real redis-server,
and the remote client over a live HTTP API. Every test runs against each; none asks which
one it has. (tests/integration/test_behaviour_serve.py runs them against `hivemem serve`.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from support.behaviour import (
    test_a_resent_turn_id_is_a_duplicate,
    test_bad_input_names_the_field,
    test_close_session_and_export,
    test_episodes_facts_timeline_and_audit,
    test_ingest_many_keeps_order_and_writes_nothing_when_one_is_bad,
    test_ingest_then_recall_returns_the_same_types,
    test_private_turns_stay_with_their_agent,
    test_session_info_title_related_and_context,
    test_unknown_and_foreign_sessions_are_not_found,
)
from support.connections import KINDS, Connection, open_connection

from hivemem.testing import RedisServer

__all__ = [
    "test_a_resent_turn_id_is_a_duplicate",
    "test_bad_input_names_the_field",
    "test_close_session_and_export",
    "test_episodes_facts_timeline_and_audit",
    "test_ingest_many_keeps_order_and_writes_nothing_when_one_is_bad",
    "test_ingest_then_recall_returns_the_same_types",
    "test_private_turns_stay_with_their_agent",
    "test_session_info_title_related_and_context",
    "test_unknown_and_foreign_sessions_are_not_found",
]


@pytest.fixture(params=KINDS)
def way(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Connection]:
    conn = None
    if request.param != "embedded":
        server: RedisServer = request.getfixturevalue("redis_server")
        conn = server.client()
        conn.flushall()
    try:
        with open_connection(request.param, tmp_path, conn) as connection:
            yield connection
    finally:
        if conn is not None:
            conn.flushall()
            conn.close()
