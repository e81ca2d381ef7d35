"""schemathesis against the live app: every operation of the committed `docs/openapi.json`,
generated valid and invalid requests with a valid key. Any 5xx, or any answer the document
does not describe (status, content type, body schema, a schema-valid request refused, an
invalid one accepted), fails.

`test_api.py` pins that the committed document is the one the app serves, so this checks
the server against what clients read. The app (middleware and all, on fakeredis and Qdrant
`:memory:`) is called through ASGI in process: a loopback round trip costs ~50 ms on a
loaded CI box. Bounded (HIVEMEM_SCHEMATHESIS_EXAMPLES per operation, default 10) to stay
under a minute.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import schemathesis  # a dev dependency: CI must run this, never skip it
from hypothesis import HealthCheck, settings
from support.api_app import build_api

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("HIVEMEM_SCHEMATHESIS_EXAMPLES", "10"))
# Built at import: schemathesis parametrizes over the document when the module is collected.
API = build_api()
API.client.ingest("s1", "user", "hello", namespace="team-a")  # a session that exists
schema = schemathesis.openapi.from_dict(json.loads((REPO / "docs" / "openapi.json").read_text()))
schema.app = API.app  # what `from_asgi` does, with the committed document


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
def test_the_server_matches_its_document(case: Any) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {API.key_a}"})
