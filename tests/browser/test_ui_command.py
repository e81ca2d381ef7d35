"""`hivemem ui` on an embedded folder: it serves the explorer and the API on loopback with a
temporary key handed over in the URL's fragment, and revokes that key when it stops."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from hivemem import MemoryClient
from hivemem.cli.ui import KEY_NAME
from hivemem.config import Settings
from hivemem.providers.embedders import HashingEmbedder

DIM = 64
# `python -m hivemem` with Ctrl-C's default Python handler (`sys.argv[1:]` its arguments).
AS_FROM_A_TERMINAL = ("import runpy, signal, sys; signal.signal(signal.SIGINT, "
                      "signal.default_int_handler); sys.argv[0] = 'hivemem'; "
                      "runpy.run_module('hivemem', run_name='__main__', alter_sys=True)")
ADDRESS = re.compile(r"^(http://127\.0\.0\.1:\d+/ui/)#key=(hm_[A-Za-z0-9_-]+)$")


def test_ui_command_serves_the_explorer_and_revokes_its_key(tmp_path: Path) -> None:
    env = {**os.environ, "HIVEMEM_EMBEDDING__PROVIDER": "hashing",
           "HIVEMEM_EMBEDDING__DIM": str(DIM)}
    # Started as from a terminal, where Ctrl-C raises KeyboardInterrupt: an ignored SIGINT
    # is inherited across exec, and another test in the same pytest worker may have left
    # it ignored (then the command stops cleanly, exit 0, and the status says nothing).
    process = subprocess.Popen(
        [sys.executable, "-c", AS_FROM_A_TERMINAL, "--local", str(tmp_path), "ui",
         "--no-browser"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        found = ADDRESS.match(line)
        assert found, (line, process.stderr.read() if process.poll() is not None else "")
        base, key = found.groups()
        page = httpx.get(base, timeout=30)
        assert page.status_code == 200 and "hivemem explorer" in page.text
        assert "default-src 'self'" in page.headers["content-security-policy"]
        who = httpx.get(base.replace("/ui/", "/v1/whoami"), timeout=30,
                        headers={"Authorization": f"Bearer {key}"})
        assert who.status_code == 200 and who.json()["namespace"] == "default"
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 130  # Ctrl-C's exit status, after the cleanup
    settings = Settings.model_validate({"embedding": {"provider": "hashing", "dim": DIM}})
    client = MemoryClient.local(tmp_path, settings, embedder=HashingEmbedder(DIM), workers=1)
    try:
        assert KEY_NAME not in [k.name for k in client.admin.api_keys().list()]
    finally:
        client.close()
