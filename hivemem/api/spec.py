"""Write the API's OpenAPI spec: ``python -m hivemem.api.spec [docs/openapi.json]``.

The checked-in ``docs/openapi.json`` is compared with the served one by a test.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from hivemem.api.app import create_app
from hivemem.config import Settings
from hivemem.producer.client import MemoryClient
from hivemem.runtime.metrics import Metrics
from hivemem.store.redis import unconnected


def openapi() -> dict[str, Any]:
    """The document of the app as `hivemem serve` builds it, from default settings and
    without a store: the routes are only declared, and a client that refuses every command
    stands in for Redis (building it reads and writes nothing)."""
    settings = Settings.model_validate({})
    client = MemoryClient(settings, redis_client=unconnected())
    try:
        spec: dict[str, Any] = create_app(settings, client=client, metrics=Metrics()).openapi()
    finally:
        client.close()
    return spec


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0] if args else "docs/openapi.json")
    path.write_text(json.dumps(openapi(), indent=2, sort_keys=True) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
