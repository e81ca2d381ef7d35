"""An app that owns an embedded folder, for the crash tests: `python embedded_owner.py
FOLDER N [durable]` ingests N turns whose embedding is slow (so most are acknowledged but not
embedded yet), prints "ingested" and then sleeps until it is killed."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

from hivemem import MemoryClient
from hivemem.config import Settings
from hivemem.providers.embedders import HashingEmbedder, Matrix

DIM = 64


class SlowEmbedder(HashingEmbedder):
    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        time.sleep(2.0)
        return super().embed_documents(texts)


def main() -> None:
    folder, count = Path(sys.argv[1]), int(sys.argv[2])
    durable = len(sys.argv) > 3 and sys.argv[3] == "durable"
    settings = Settings.model_validate({"embedding": {"provider": "hashing", "dim": DIM}})
    client = MemoryClient.local(folder, settings, embedder=SlowEmbedder(DIM), workers=1,
                                durable=durable)
    client.ingest_many([{"session_id": "crash", "role": "user", "content": f"turn number {i}"}
                        for i in range(count)])
    print("ingested", flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main()
