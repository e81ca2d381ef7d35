"""Each docs/integrations page's example runs: its python block is executed as written,
except that the store it opens (``MemoryClient.local("./memory")``) is a temporary one with
the hashing embedder, so that no model loads."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "integrations"
OPEN = 'MemoryClient.local("./memory")'
PAGES = {"langgraph.md": "langgraph", "openai-agents.md": "agents",
         "google-adk.md": "google.adk", "llama-index.md": "llama_index.core",
         "crewai.md": "crewai"}


def _needs(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_page_example_runs(page: str, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    path = DOCS / page
    if not path.exists():
        pytest.skip(f"no page {page} yet")
    if not _needs(PAGES[page]):
        pytest.skip(f"{PAGES[page]} is not installed")
    blocks = re.findall(r"```python\n(.*?)```", path.read_text(), re.S)
    assert blocks, page
    code = blocks[0]
    assert OPEN in code, f"{page}'s example opens its store another way"
    code = code.replace(OPEN, "MemoryClient.local(_folder, _settings, embedder=_embedder)")
    from hivemem import Settings
    from hivemem.providers.embedders import HashingEmbedder

    monkeypatch.chdir(tmp_path)
    scope = {"__name__": "__docs__", "_folder": tmp_path / "memory",
             "_settings": Settings.model_validate(
                 {"embedding": {"provider": "hashing", "dim": 256}}),
             "_embedder": HashingEmbedder(256)}
    exec(compile(code, str(path), "exec"), scope)
