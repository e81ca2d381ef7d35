"""A CLI test's environment: no HIVEMEM_* variable of the caller's, only the test's own, and
the temporary folder as the working directory."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest


def isolate(monkeypatch: pytest.MonkeyPatch, folder: Path, env: Mapping[str, str]) -> None:
    for name in list(os.environ):
        if name.startswith("HIVEMEM_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(folder)
