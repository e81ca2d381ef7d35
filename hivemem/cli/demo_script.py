"""The scripted multi-agent conversation `hivemem demo` ingests, and its questions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

SESSION = "demo-project"
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)

# (agent, role, content, markers): a planner, a coder and a reviewer build a service.
SCRIPT: list[tuple[str | None, str, str, list[str] | None]] = [
    (None, "user", "We need a small service that stores customer orders and exposes them over"
     " a REST API. It has to be live by the end of the month.", ["goal"]),
    ("planner", "assistant", "Plan: API layer, persistence, background jobs for invoices. I'll"
     " split the work between the coder and the reviewer.", None),
    (None, "user", "Keep in mind the API must never return more than 100 orders per page; our"
     " mobile client crashes on bigger payloads.", ["constraint"]),
    ("planner", "assistant", "Decision: we'll use PostgreSQL for persistence because we need"
     " transactions and JSON columns for order line items.", ["decision"]),
    ("coder", "assistant", "Scaffolded the project with FastAPI and SQLAlchemy. Tests run in"
     " GitHub Actions.", None),
    (None, "user", "I prefer type-annotated code and small functions, please.", None),
    ("coder", "assistant", "Added the orders table and the GET /orders endpoint with cursor"
     " pagination, page size capped at 100.", None),
    ("reviewer", "assistant", "Reviewed the orders endpoint: pagination looks right, but the"
     " cursor should be opaque, not the raw primary key.", None),
    ("coder", "assistant", "Tried deploying to the staging cluster with the default Helm chart;"
     " it failed because the chart's liveness probe hits /health, which we don't expose.",
     ["failure"]),
    ("planner", "assistant", "Let's add /health and /ready endpoints before the next deploy.",
     None),
    (None, "user", "What's the weather like for the team offsite on Friday?", None),
    ("planner", "assistant", "Sunny, 21 degrees, light wind. Good day for the offsite.", None),
    ("coder", "assistant", "Invoice generation job: used rq with a Redis queue; retries three"
     " times with a 30 second interval.", None),
    ("reviewer", "assistant", "The invoice PDFs render with the wrong currency symbol for EUR"
     " customers.", None),
    ("coder", "assistant", "Fixed the currency symbol by formatting with Babel's locale-aware"
     " number formatting.", None),
    (None, "user", "Budget constraint: the whole thing has to run on a single 4 GB VM for now.",
     ["constraint"]),
    ("planner", "assistant", "Given the 4 GB limit we'll skip Elasticsearch and use Postgres"
     " full-text search for order lookup.", ["decision"]),
    ("coder", "assistant", "Postgres full-text search on order notes works; a GIN index keeps"
     " lookups under 20 ms on the test data.", None),
    ("reviewer", "assistant", "Load test: 200 requests per second on the orders endpoint, p99"
     " 45 ms. Good enough for launch.", None),
    (None, "user", "The mobile team asked if we can add webhooks when an order ships.", None),
    ("planner", "assistant", "Goal for next week: order-shipped webhooks with signed payloads"
     " and retries.", ["goal"]),
    ("coder", "assistant", "First webhook attempt used plain HTTP callbacks without signatures;"
     " the security review rejected it.", ["failure"]),
    ("coder", "assistant", "Webhooks now carry an HMAC-SHA256 signature header and retry with"
     " exponential backoff up to 6 times.", None),
    ("reviewer", "assistant", "Signed webhooks approved. Remember to document the signature"
     " scheme for the mobile team.", None),
    (None, "user", "Change of plan from ops: they only run MySQL in production, so we have to"
     " switch the database to MySQL instead of PostgreSQL.", None),
    ("planner", "assistant", "Decision: we switch to MySQL for the database; full-text search"
     " moves to MySQL's FULLTEXT indexes.", ["decision"]),
    ("coder", "assistant", "Migrated the schema to MySQL 8; the GIN index became a FULLTEXT"
     " index and the tests pass.", None),
]

QUESTIONS = [
    "Which database are we using?",
    "What went wrong when we deployed to staging?",
    "What limits does the API have on page size?",
    "How are webhooks secured?",
    "What does the user prefer for code style?",
]


def timestamp(index: int) -> datetime:
    return START + timedelta(minutes=7 * index)
