"""A real Redis Cluster on loopback ports for tests and benchmarks: N masters (and one
replica each, when asked), started as redis-server processes in cluster mode and joined
with ``redis-cli --cluster create``. Stopped by the pids it started."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis


def _free(port: int) -> bool:
    for p in (port, port + 10000):  # the cluster bus listens on port + 10000
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                return False
    return True


def _port_range() -> tuple[int, int]:
    """17000-19000, split between pytest-xdist's workers (gw0, gw1, ...): a port another
    worker found free a moment ago is not one this worker can find free too, so two
    clusters starting at once never share a node."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or count <= 1:
        return 17000, 19000
    span = 2000 // count
    low = 17000 + int(worker[2:]) % count * span
    return low, low + span - 1


def _ports(n: int) -> list[int]:
    low, high = _port_range()
    out: list[int] = []
    while len(out) < n:
        port = random.randint(low, high)
        if port not in out and _free(port):
            out.append(port)
    return out


@dataclass
class RedisCluster:
    folder: Path
    masters: int = 3
    replicas: int = 1
    ports: list[int] = field(default_factory=list)
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @staticmethod
    def available() -> bool:
        return bool(shutil.which("redis-server") and shutil.which("redis-cli"))

    @property
    def url(self) -> str:
        """hivemem's cluster URL: every node as a seed."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def start(self, timeout: float = 30.0) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.ports = _ports(self.masters * (1 + self.replicas))
        for port in self.ports:
            self._procs.append(self._spawn(port))
        deadline = time.monotonic() + timeout
        for port in self.ports:
            while True:
                try:
                    redis.Redis(port=port, socket_timeout=1).ping()
                    break
                except redis.RedisError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"cluster node {port} did not start") from None
                    time.sleep(0.05)
        subprocess.run(
            ["redis-cli", "--cluster", "create",
             *(f"127.0.0.1:{p}" for p in self.ports),
             "--cluster-replicas", str(self.replicas), "--cluster-yes"],
            check=True, capture_output=True, timeout=timeout)
        self.wait_ok(deadline - time.monotonic())

    def _spawn(self, port: int) -> subprocess.Popen[bytes]:
        node = self.folder / str(port)
        node.mkdir(exist_ok=True)
        return subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
             "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
             "--cluster-node-timeout", "1500", "--save", "", "--appendonly", "no",
             "--dir", str(node), "--logfile", str(node / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def kill(self, port: int) -> None:
        """SIGKILL the node on `port`."""
        proc = self._procs[self.ports.index(port)]
        proc.kill()
        proc.wait(timeout=10)

    def restart(self, port: int, timeout: float = 30.0) -> None:
        """Start the (killed) node on `port` again on its folder: it rejoins with its
        nodes.conf, as a replica when it was failed over meanwhile."""
        self._procs[self.ports.index(port)] = self._spawn(port)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.node(port).ping()
                break
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"cluster node {port} did not restart") from None
                time.sleep(0.05)
        self.wait_ok(deadline - time.monotonic())

    def wait_master(self, port: int, timeout: float = 20.0) -> None:
        """Until the node on `port` says it is a master."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.node(port).info("replication")["role"] == "master":
                    return
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"node {port} was not promoted")
            time.sleep(0.02)

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Until every node says cluster_state:ok and every slot is served."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if all(self.node(p).cluster("info")["cluster_state"] == "ok"  # type: ignore[index]
                       for p in self.live_ports()):
                    return
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("cluster did not reach cluster_state:ok")
            time.sleep(0.1)

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, socket_timeout=2, decode_responses=True)

    def live_ports(self) -> list[int]:
        return [p for p, proc in zip(self.ports, self._procs, strict=True) if proc.poll() is None]

    def roles(self) -> dict[int, str]:
        """port -> "master" | "slave"."""
        return {p: str(self.node(p).info("replication")["role"]) for p in self.live_ports()}

    def client(self) -> redis.RedisCluster:
        return redis.RedisCluster(host="127.0.0.1", port=self.ports[0])

    def failover(self) -> int:
        """Promote a replica (CLUSTER FAILOVER on it); returns the promoted port."""
        replica = next(p for p, role in self.roles().items() if role == "slave")
        self.node(replica).execute_command("CLUSTER FAILOVER")
        deadline = time.monotonic() + 20
        while self.roles().get(replica) != "master":
            if time.monotonic() > deadline:
                raise RuntimeError(f"replica {replica} was not promoted")
            time.sleep(0.05)
        self.wait_ok()
        return replica

    def stop(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self._procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        self._procs.clear()
