from pathlib import Path

import pytest

from hivemem.config import Settings


def test_env_prefix_and_nesting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIVEMEM_REDIS__URL", "redis://cache:6380/2")
    monkeypatch.setenv("HIVEMEM_QDRANT__PATH", "/data/q")
    monkeypatch.setenv("HIVEMEM_EMBEDDING__BATCH_SIZE", "128")
    monkeypatch.setenv("HIVEMEM_RECALL__DEFAULT_TOKEN_BUDGET", "900")
    s = Settings()
    assert s.redis.url == "redis://cache:6380/2"
    assert s.qdrant.path == Path("/data/q")
    assert s.embedding.batch_size == 128
    assert s.recall.default_token_budget == 900


def test_defaults() -> None:
    s = Settings.model_validate({})
    assert s.embedding.model == "sentence-transformers/all-MiniLM-L6-v2"
    assert s.recall.default_token_budget == 4000
    assert s.ingest.max_content_bytes == 32 * 1024
    assert s.worker.block_ms < s.redis.socket_timeout * 1000


def test_rejects_both_qdrant_targets() -> None:
    with pytest.raises(ValueError, match="either"):
        Settings.model_validate({"qdrant": {"url": "http://q:6333", "path": "/x"}})


def test_secrets_do_not_print() -> None:
    s = Settings.model_validate({"qdrant": {"url": "http://q:6333", "api_key": "s3cret"}})
    assert "s3cret" not in repr(s)
    assert "s3cret" not in s.model_dump_json()


def test_config_names_match_the_domain() -> None:
    """config.py imports no domain code, so the names it validates are spelled there too."""
    from typing import get_args

    from hivemem.config import FactKindName, PresetName
    from hivemem.domain.fact import FactKind
    from hivemem.domain.recall.policy import PRESETS

    assert set(get_args(PresetName)) == set(PRESETS)
    assert set(get_args(FactKindName)) == {k.value for k in FactKind}


def test_config_imports_no_domain_code() -> None:
    import ast
    from pathlib import Path

    import hivemem.config

    tree = ast.parse(Path(hivemem.config.__file__).read_text())
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [m for m in imported if m and m.startswith("hivemem")], imported


def test_unknown_default_preset_is_refused() -> None:
    import pydantic
    import pytest

    from hivemem.config import RecallSettings

    with pytest.raises(pydantic.ValidationError):
        RecallSettings(default_preset="fastest")  # type: ignore[arg-type]


def test_search_threads_from_the_environment_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings.model_validate({}).qdrant.index.search_threads == 1
    monkeypatch.setenv("HIVEMEM_QDRANT__INDEX__SEARCH_THREADS", "0")
    assert Settings().qdrant.index.search_threads == 0
    with pytest.raises(ValueError, match="search_threads"):
        Settings.model_validate({"qdrant": {"index": {"search_threads": -1}}})
