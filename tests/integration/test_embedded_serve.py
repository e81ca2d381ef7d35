"""`hivemem serve` on an embedded folder, as real processes: the CLI works beside it (as the
folder owner's guest), and SIGTERM (how Docker and systemd stop services) loses nothing."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.integration

CLI = [str(Path(sys.executable).with_name("hivemem"))]
SESSION = "served"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIVEMEM_")}
    env.update({"HIVEMEM_EMBEDDING__PROVIDER": "hashing", "HIVEMEM_EMBEDDING__DIM": "64",
                "HIVEMEM_LOG_JSON": "true"})
    return env


def _cli(folder: Path, *args: str) -> Any:
    done = subprocess.run([*CLI, "--local", str(folder), *args], env=_env(),
                          capture_output=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    return json.loads(done.stdout)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Served:
    def __init__(self, folder: Path, log: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [*CLI, "--local", str(folder), "serve", "--port", str(self.port)],
                env=_env(), stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                pytest.fail(f"serve did not get ready: {log.read_text(errors='replace')}")
            time.sleep(0.1)

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=60)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def _stats(client: httpx.Client) -> dict[str, Any]:
    response = client.get(f"/v1/sessions/{SESSION}/stats")
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def test_cli_beside_serve_and_sigterm_loses_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    key = _cli(folder, "apikey", "create", "default", "--name", "test", "--json")["key"]
    served = Served(folder, tmp_path / "serve.log")
    try:
        http = httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {key}"},
                            timeout=30)
        for content in ("we deploy the billing service on fridays",
                        "the billing database is postgres 16"):
            response = http.post(f"/v1/sessions/{SESSION}/turns",
                                 json={"role": "user", "content": content})
            assert response.status_code == 201, response.text
        assert http.post(f"/v1/sessions/{SESSION}/episodes/close", json={}).status_code == 200
        deadline = time.monotonic() + 60
        while _stats(http)["episodes"] < 1:
            assert time.monotonic() < deadline, _stats(http)
            time.sleep(0.2)

        # The CLI while serve runs: the folder's owner is serve, the CLI its guest.
        keys = _cli(folder, "apikey", "list", "--json")
        assert [k["namespace"] for k in keys] == ["default"]
        found = _cli(folder, "recall", "billing database", "--session", SESSION, "--json")
        assert any("postgres" in r["content"] for r in found["items"]), found
        status = _cli(folder, "status", "--session", SESSION, "--json")
        assert status["owner_pid"] == served.process.pid  # went through serve
        assert status["sessions"][SESSION]["episodes"] == 1
        recalled = _cli(folder, "recall", "which database", "-s", SESSION, "--json")
        assert "postgres" in json.dumps(recalled)

        assert served.stop() == 0, served.log.read_text(errors="replace")
    finally:
        served.kill()

    again = Served(folder, tmp_path / "serve.log")
    try:
        http = httpx.Client(base_url=again.url, headers={"Authorization": f"Bearer {key}"},
                            timeout=30)
        stats = _stats(http)
        assert stats["episodes"] == 1, stats
        assert stats["last_seq"] >= 2
        assert again.stop() == 0
    finally:
        again.kill()
