"""The embedded reflection process, started after its owner's store is gone (a client opened
and closed at once), exits with one log line, not a traceback."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

from hivemem.config import Settings
from hivemem.runtime.reflect_process import ChildOrder


def test_a_child_whose_store_is_gone_exits_quietly(tmp_path: Path) -> None:
    gone = tmp_path / "redis.sock"  # never created
    settings = Settings.model_validate({"redis": {"url": f"unix://{gone}"}})
    order = ChildOrder(settings=settings, vectors_url="http://127.0.0.1:9/", key="k", nice=0,
                       log_level="warning")
    done = subprocess.run([sys.executable, "-m", "hivemem.runtime.reflect_child"],
                          input=pickle.dumps(order), capture_output=True, timeout=120,
                          check=False)
    err = done.stderr.decode()
    assert done.returncode == 1
    assert "Traceback" not in err
    assert "embedded.reflect_child_store_gone" in err
