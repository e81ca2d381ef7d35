"""API keys: one namespace each, stored salted and hashed, revocable; and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from hivemem.cli.main import cli
from hivemem.pipeline.topology import Keys
from hivemem.store.apikeys import ApiKeyStore


def test_create_authenticate_revoke(redis_client: redis.Redis) -> None:
    store = ApiKeyStore(redis_client, Keys("hm"))
    key, info = store.create("team-a", "ci")
    assert key.startswith(f"hm_{info.key_id}_") and info.namespace == "team-a"
    stored = redis_client.hgetall(f"hm:apikey:{info.key_id}")
    secret = key.split("_", 2)[2]
    assert all(secret.encode() not in v for v in stored.values())  # only the salted hash
    assert store.authenticate(key) == info
    assert store.authenticate(key[:-1] + ("A" if key[-1] != "A" else "B")) is None
    assert store.authenticate(f"hm_{'0' * 12}_{secret}") is None
    assert store.authenticate("garbage") is None and store.authenticate("") is None
    other, _ = store.create("team-b")
    assert [i.namespace for i in store.list()] == ["team-a", "team-b"]
    assert store.revoke(info.key_id) and not store.revoke(info.key_id)
    assert store.authenticate(key) is None and store.authenticate(other) is not None
    assert store.revoke(other)  # the whole key works too
    assert store.list() == []


def test_apikey_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mp = monkeypatch
    for name in ("HIVEMEM_REDIS__URL", "HIVEMEM_QDRANT__URL", "HIVEMEM_QDRANT__PATH"):
        mp.delenv(name, raising=False)
    mp.setenv("HIVEMEM_EMBEDDING__PROVIDER", "hashing")
    store = str(tmp_path) + "/mem"
    runner = CliRunner()
    created = runner.invoke(cli, ["--local", store, "apikey", "create", "team-a",
                                  "--name", "bot", "--json"])
    assert created.exit_code == 0, created.output
    data = json.loads(created.output)
    listed = runner.invoke(cli, ["--local", store, "apikey", "list", "--json"])
    rows = json.loads(listed.output)
    assert [(r["key_id"], r["namespace"], r["name"]) for r in rows] == [
        (data["key_id"], "team-a", "bot")]
    assert data["key"] not in listed.output
    bad = runner.invoke(cli, ["--local", store, "apikey", "create", "bad namespace!"])
    assert bad.exit_code == 2
    revoked = runner.invoke(cli, ["--local", store, "apikey", "revoke", data["key_id"]])
    assert revoked.exit_code == 0, revoked.output
    again = runner.invoke(cli, ["--local", store, "apikey", "revoke", data["key_id"]])
    assert again.exit_code == 1


def test_agent_keys_are_bound_to_their_agent(redis_client: redis.Redis) -> None:
    store = ApiKeyStore(redis_client, Keys("hm"))
    key, info = store.create("team-a", "alice's", agent_id="alice")
    assert (info.agent_id, info.kind) == ("alice", "agent")
    assert store.authenticate(key) == info
    assert store.list()[0].agent_id == "alice"
    plain, plain_info = store.create("team-a")
    assert (plain_info.agent_id, plain_info.kind) == (None, "namespace")
    assert store.authenticate(plain) == plain_info
    from hivemem import ValidationError

    with pytest.raises(ValidationError) as err:
        store.create("team-a", agent_id="not an id!")
    assert err.value.field == "agent_id"


def test_apikey_cli_binds_an_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HIVEMEM_REDIS__URL", "HIVEMEM_QDRANT__URL", "HIVEMEM_QDRANT__PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HIVEMEM_EMBEDDING__PROVIDER", "hashing")
    store = str(tmp_path) + "/mem"
    runner = CliRunner()
    created = runner.invoke(cli, ["--local", store, "apikey", "create", "team-a",
                                  "--agent", "planner", "--json"])
    assert created.exit_code == 0, created.output
    data = json.loads(created.output)
    assert (data["agent_id"], data["kind"]) == ("planner", "agent")
    listed = runner.invoke(cli, ["--local", store, "apikey", "list"])
    assert "planner" in listed.output and data["key_id"] in listed.output
    bad = runner.invoke(cli, ["--local", store, "apikey", "create", "team-a", "--agent", "a b"])
    assert bad.exit_code == 2 and "--agent" in bad.output
