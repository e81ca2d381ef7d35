"""The shared behavioural suite (`support.behaviour`) through `hivemem.connect` against a
real ``hivemem --local DIR serve`` process (embedded mode: its own Redis, Qdrant Edge and
worker threads, the API under uvicorn), as a user runs it. The keys are made with the CLI
before the server starts."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
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
from support.connections import Connection

from hivemem import connect

pytestmark = pytest.mark.integration

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
HIVEMEM = [sys.executable, "-c", "from hivemem.cli.main import main; main()"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def way(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Connection]:
    folder = tmp_path_factory.mktemp("serve")
    store = str(folder / "store")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIVEMEM_")}
    env.update({"HIVEMEM_EMBEDDING__PROVIDER": "hashing", "HIVEMEM_EMBEDDING__DIM": "256",
                "HIVEMEM_LOG_LEVEL": "warning"})
    keys = []
    for namespace in ("team-a", "team-b"):
        out = subprocess.run([*HIVEMEM, "--local", store, "apikey", "create", namespace,
                              "--json"], env=env, check=True, capture_output=True,
                             text=True, cwd=folder).stdout
        keys.append(json.loads(out)["key"])
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log_path: Path = folder / "serve.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen([*HIVEMEM, "--local", store, "serve", "--port", str(port)],
                                  env=env, stdout=log, stderr=subprocess.STDOUT, cwd=folder)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"hivemem serve did not start: {log_path.read_text()[-2000:]}")
            time.sleep(0.2)
        team_a, team_b = connect(url, api_key=keys[0]), connect(url, api_key=keys[1])
        try:
            yield Connection("serve", team_a.for_agent, team_b)
        finally:
            team_a.close()
            team_b.close()
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)
