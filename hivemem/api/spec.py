"""Write the API's OpenAPI spec: ``python -m hivemem.api.spec [docs/openapi.json]``.

The checked-in ``docs/openapi.json`` is compared with the served one by a test.
"""

from __future__ import annotations

import argparse
import json
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
    parser = argparse.ArgumentParser(
        prog="python -m hivemem.api.spec", description="Write the API's OpenAPI document.")
    parser.add_argument("path", nargs="?", default="docs/openapi.json", type=Path,
                        help="where to write it (default: docs/openapi.json)")
    path: Path = parser.parse_args(argv).path
    path.write_text(json.dumps(openapi(), indent=2, sort_keys=True) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
