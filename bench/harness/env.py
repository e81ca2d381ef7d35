"""The model and offline environment: fastembed reads the shared cache, never the network."""

from __future__ import annotations

import os
from pathlib import Path

from harness.paths import MODEL_CACHE

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def model_cache() -> Path:
    """FASTEMBED_CACHE_PATH when set (a git worktree sits one folder deeper than /work/main,
    so the path next to the repository may not exist), else ../shared/models/fastembed_cache."""
    configured = os.environ.get("FASTEMBED_CACHE_PATH")
    if configured and Path(configured).exists():
        return Path(configured)
    return MODEL_CACHE


def offline_model_env() -> Path:
    """Point fastembed at the shared cache, offline. Must run before fastembed loads."""
    cache = model_cache()
    if not cache.exists():
        raise SystemExit(f"model cache not found: {cache} (set FASTEMBED_CACHE_PATH)")
    os.environ["FASTEMBED_CACHE_PATH"] = str(cache)
    os.environ["HF_HUB_OFFLINE"] = "1"
    return cache
