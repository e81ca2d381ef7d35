"""The deployment files say what runs (issue 39): read here, not run (no Docker on CI).

- Every image is pinned to a full version (or a digest), the Dockerfile's base too, and the
  Dockerfile installs on CI's pinned constraints.
- Every HIVEMEM_* variable a compose file sets is a real setting, with a value the settings
  accept; every hivemem service runs a real command (`serve`, or `worker` of a real kind).
- The hosts the Redis URLs name are services of the same deployment; in the replicated file
  the Sentinels watch the master name the URLs ask for, on the primary, and the replica
  replicates the primary.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from hivemem import config_doc
from hivemem.config import Settings
from hivemem.runtime.runner import KINDS

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
MAIN = ROOT / "docker-compose.yml"
OVERLAYS = [ROOT / "docker-compose.cluster.yml", ROOT / "docker-compose.replicated.yml"]
PINNED = re.compile(r"^[\w./-]+(:v?\d+\.\d+\.\d+[\w.-]*|@sha256:[0-9a-f]{64})$")


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


def _merged(overlay: Path | None) -> dict[str, dict[str, Any]]:
    """The services of the main file with `overlay` on top (compose merges the maps of a
    service key by key; environment and depends_on too)."""
    services = {k: dict(v) for k, v in _load(MAIN)["services"].items()}
    if overlay is not None:
        for name, extra in _load(overlay)["services"].items():
            base = services.setdefault(name, {})
            for key, value in extra.items():
                if isinstance(value, dict) and isinstance(base.get(key), dict):
                    base[key] = {**base[key], **value}
                else:
                    base[key] = value
    return services


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    return {str(k): str(v) for k, v in env.items()}


def _settings_from(env: dict[str, str]) -> Settings:
    """The settings a container with this environment builds (nothing else from the host)."""
    tree: dict[str, Any] = {}
    for key, value in env.items():
        if not key.startswith("HIVEMEM_"):
            continue
        parts = key.removeprefix("HIVEMEM_").lower().split("__")
        node = tree
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return Settings.model_validate(tree)


@pytest.mark.parametrize("path", [MAIN, *OVERLAYS], ids=lambda p: p.name)
def test_every_image_is_pinned(path: Path) -> None:
    images = [s["image"] for s in _load(path)["services"].values() if "image" in s]
    images += [v["image"] for k, v in _load(path).items()
               if k.startswith("x-") and isinstance(v, dict) and "image" in v]
    assert images
    for image in images:
        assert PINNED.match(image), f"{path.name}: {image} is not pinned to a full version"


def test_the_dockerfile_is_pinned_and_installs_on_the_constraints() -> None:
    text = (ROOT / "Dockerfile").read_text()
    base = re.search(r"^FROM\s+(\S+)", text, re.M)
    assert base and PINNED.match(base.group(1)), base
    assert "COPY .ci/constraints.txt" in text
    install = next(line for line in text.splitlines() if "pip install" in line)
    assert "-c .ci/constraints.txt" in install
    assert (ROOT / ".ci" / "constraints.txt").is_file()


@pytest.mark.parametrize("overlay", [None, *OVERLAYS],
                         ids=lambda p: "main" if p is None else p.name)
def test_every_setting_and_command_is_real(overlay: Path | None) -> None:
    known = {s.env for section in config_doc.sections() for s in section.settings}
    services = _merged(overlay)
    ours = {name: s for name, s in services.items() if s.get("build")}
    assert {"api", "embed", "boundary", "reflect"} <= set(ours)
    for name, service in ours.items():
        env = _env(service)
        unknown = {k for k in env if k.startswith("HIVEMEM_")} - known
        assert not unknown, f"{name}: not settings: {unknown}"
        _settings_from(env)  # every value is one the settings accept
        command = service["command"]
        assert command[0] in {"serve", "worker"}, (name, command)
        if command[0] == "worker":
            assert command[1] in KINDS, (name, command)


@pytest.mark.parametrize("overlay", [None, *OVERLAYS],
                         ids=lambda p: "main" if p is None else p.name)
def test_the_redis_urls_name_services_of_the_deployment(overlay: Path | None) -> None:
    services = _merged(overlay)
    for name, service in services.items():
        env = _env(service)
        for key in ("HIVEMEM_REDIS__URL", "HIVEMEM_REDIS__RQ_URL"):
            if key not in env:
                continue
            hosts = re.sub(r"^[\w+]+://", "", env[key]).split("/", 1)[0].split(",")
            for host in hosts:
                assert host.split(":")[0] in services, f"{name}: {key} names {host}"


def test_the_replicated_file_watches_the_primary_under_the_name_the_urls_ask_for() -> None:
    path = ROOT / "docker-compose.replicated.yml"
    data = _load(path)
    services = _merged(path)
    url = _env(services["api"])["HIVEMEM_REDIS__URL"]
    assert url.startswith("redis+sentinel://")
    master_name = url.rsplit("/", 1)[1]
    sentinels = [n for n in data["services"] if n.startswith("sentinel-")]
    assert len(sentinels) >= 3
    script = " ".join(data["x-sentinel"]["entrypoint"])
    monitor = re.search(r"sentinel monitor (\S+) (\S+) (\d+) (\d+)", script)
    assert monitor is not None
    name, host, port, quorum = monitor.groups()
    assert (name, host, port) == (master_name, "redis-primary", "6379")
    assert int(quorum) == len(sentinels) // 2 + 1
    replica = services["redis-replica"]["command"]
    at = replica.index("--replicaof")
    assert replica[at + 1:at + 3] == ["redis-primary", "6379"]
    assert _settings_from(_env(services["embed"])).ingest.ack == "replica"
    for name in ("redis-primary", "redis-replica"):
        command = services[name]["command"]
        assert command[command.index("--appendonly") + 1] == "yes", name


def test_the_kubernetes_manifest_runs_real_commands_on_real_settings() -> None:
    docs = [d for d in yaml.safe_load_all(
        (ROOT / "deploy" / "kubernetes" / "hivemem.yaml").read_text()) if d]
    config = next(d for d in docs if d["kind"] == "ConfigMap")
    env = {str(k): str(v) for k, v in config["data"].items()}
    known = {s.env for section in config_doc.sections() for s in section.settings}
    assert {k for k in env if k.startswith("HIVEMEM_")} <= known
    settings = _settings_from(env)
    assert settings.ingest.ack == "replica" and settings.redis.rq_url is not None
    app_source = (ROOT / "hivemem" / "api" / "app.py").read_text()
    deployments = [d for d in docs if d["kind"] == "Deployment"]
    kinds = set()
    for deployment in deployments:
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            args = container["args"]
            assert args[0] in {"serve", "worker"}, args
            if args[0] == "worker":
                assert args[1] in KINDS, args
                kinds.add(args[1])
                assert container["ports"][0]["containerPort"] == int(
                    args[args.index("--metrics-port") + 1])
            assert container["envFrom"] == [{"configMapRef": {"name": "hivemem-env"}}]
            ports = {p["name"] for p in container["ports"]}
            for probe in ("readinessProbe", "livenessProbe"):
                if probe in container:
                    get = container[probe]["httpGet"]
                    assert get["port"] in ports
                    assert get["path"] == "/metrics" or f'@app.get("{get["path"]}"' in (
                        app_source), get
    assert kinds == {"embed", "boundary", "reflect"}
