"""An owner that dies in the middle of a forget, for the crash test: `python -m
tests.support.forget_crash FOLDER SECRET` writes a session holding SECRET and a bystander,
waits until both are embedded, then forgets the first with a step that hangs after the
vectors and the streams are erased (it prints "forgetting" there), until it is killed."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from hivemem import MemoryClient
from hivemem.config import Settings
from hivemem.providers.embedders import HashingEmbedder
from hivemem.store.erasure import ErasureStore

DIM = 64


def main() -> None:
    folder, secret = Path(sys.argv[1]), sys.argv[2]
    settings = Settings.model_validate({"embedding": {"provider": "hashing", "dim": DIM},
                                        "lifecycle": {"forget_settle_s": 0.0}})
    client = MemoryClient.local(folder, settings, embedder=HashingEmbedder(DIM), workers=1,
                                as_guest=False)
    handle = client.scoped()
    handle.ingest("doomed", "user", f"We decided the safe code is {secret}",
                  markers=["decision"])
    handle.ingest("kept", "user", "We decided to paint the door blue", markers=["decision"])
    handle.wait_until_processed("doomed", 30)
    handle.wait_until_processed("kept", 30)

    def hang(*_args: object, **_kwargs: object) -> int:
        print("forgetting", flush=True)
        time.sleep(600)
        return 0

    ErasureStore.erase_traces = hang  # type: ignore[method-assign]
    handle.forget("doomed")


if __name__ == "__main__":
    main()
