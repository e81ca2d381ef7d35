"""The configuration page, generated from `hivemem.config.Settings`.

`python -m hivemem.config_doc > docs/configuration.md` writes it; a test checks that the
committed page is what this prints. Each setting's description is the comment written above
its field in `hivemem/config.py` (or after it on the same line), so the page cannot drift
from the code: a setting is described where it is defined.
"""

# ruff: noqa: E501  (DESCRIBED_HERE is a table: one setting a line)

from __future__ import annotations

import ast
import inspect
import json
import types
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr
from pydantic_core import PydanticUndefined

from hivemem import config

ENV_PREFIX = "HIVEMEM_"
NESTING = "__"

# Settings whose field in hivemem/config.py carries no comment: described here (mostly from
# the README's old configuration table). A test checks that every key names a setting and
# that every setting has a description, from config.py or from here.
DESCRIBED_HERE: dict[str, str] = {
    "HIVEMEM_LOG_LEVEL": "`debug`, `info`, `warning` or `error` (structlog).",
    "HIVEMEM_REDIS__MODE": "`standalone`, `cluster` or `sentinel`; `auto`: from the URL's scheme.",
    "HIVEMEM_REDIS__PASSWORD": "The password of `username` (or the AUTH password alone); never logged.",
    "HIVEMEM_REDIS__KEY_PREFIX": "Prefix of every key (several installations on one Redis).",
    "HIVEMEM_REDIS__CONNECT_TIMEOUT": "Seconds to open a connection.",
    "HIVEMEM_QDRANT__URL": "A Qdrant server or cluster (`http://host:6333`).",
    "HIVEMEM_QDRANT__PATH": "The embedded Qdrant engine on this folder (opened by its owner process).",
    "HIVEMEM_QDRANT__API_KEY": "Qdrant API key (use an `https://` URL); never logged.",
    "HIVEMEM_QDRANT__COLLECTION_PREFIX": "Prefix of the collection names.",
    "HIVEMEM_QDRANT__BACKOFF_INITIAL_S": "First wait between read retries (seconds).",
    "HIVEMEM_QDRANT__BACKOFF_MAX_S": "Longest wait between read retries (seconds).",
    "HIVEMEM_QDRANT__REPLICATION_FACTOR": "Replicas of each shard of a collection hivemem creates (unset: the server's default).",
    "HIVEMEM_QDRANT__INDEX__HNSW_EF_CONSTRUCT": "Candidates while building the HNSW graph.",
    "HIVEMEM_EMBEDDING__PROVIDER": "`fastembed`, or `hashing` (tests only: no model, no meaning).",
    "HIVEMEM_EMBEDDING__MODEL": "The fastembed model name.",
    "HIVEMEM_EMBEDDING__CACHE_DIR": "fastembed's cache folder (unset: `$FASTEMBED_CACHE_PATH`).",
    "HIVEMEM_INGEST__MAX_CONTENT_BYTES": "Larger content is a `ValidationError`.",
    "HIVEMEM_INGEST__MAX_METADATA_BYTES": "Largest metadata, as JSON.",
    "HIVEMEM_INGEST__BACKPRESSURE": "Over `max_backlog`: `raise` (`Backpressure`, HTTP 429) or `block` (wait up to `block_timeout_s`).",
    "HIVEMEM_INGEST__BLOCK_TIMEOUT_S": "Longest an ingest waits under `backpressure: block`.",
    "HIVEMEM_INGEST__BACKLOG_CHECK_EVERY": "Measure the backlog every this many turns (one XINFO GROUPS round trip).",
    "HIVEMEM_INGEST__BACKLOG_CHECK_INTERVAL_S": "... or after this many seconds, whichever comes first.",
    "HIVEMEM_WORKER__BLOCK_MS": "Blocking read; keep it well under the Redis socket timeout.",
    "HIVEMEM_WORKER__CLAIM_INTERVAL_S": "How often a worker looks for orphaned entries and refreshes its partitions.",
    "HIVEMEM_WORKER__MAX_DELIVERIES": "After this many deliveries an entry goes to the dead-letter stream.",
    "HIVEMEM_WORKER__BACKOFF_MAX_S": "Longest wait between retries of a batch while a store is down.",
    "HIVEMEM_RECALL__DEFAULT_TOKEN_BUDGET": "Token budget when the caller gives none (a preset may set its own).",
    "HIVEMEM_RECALL__DEFAULT_PRESET": "`cheap`, `balanced`, `high_recall` or `agent_state`.",
    "HIVEMEM_EPISODES__MAX_TURNS": "An episode closes with this many turns.",
    "HIVEMEM_EPISODES__MAX_GAP_SECONDS": "A gap this long between turn timestamps starts a new episode.",
    "HIVEMEM_EPISODES__TOPIC_MIN_TOKENS": "A turn shorter than this never starts a new episode by topic.",
    "HIVEMEM_EPISODES__TOPIC_MIN_TURNS": "An episode must hold this many turns before a topic shift closes it.",
    "HIVEMEM_EPISODES__MIN_EPISODE_TURNS": "Shorter episodes carry forward into the next.",
    "HIVEMEM_EPISODES__REFLECT_QUEUE": "The rq queue of reflection jobs.",
    "HIVEMEM_REFLECTION__NAMESPACE": "Not read by any code in this version.",
    "HIVEMEM_REFLECTION__MAX_FACTS_PER_EPISODE": "At most this many facts from one episode.",
    "HIVEMEM_REFLECTION__DEDUP_THRESHOLD": "Cosine at which a new fact merges into an active one.",
    "HIVEMEM_REFLECTION__MIN_CONFIDENCE": "Facts less confident than this are dropped.",
    "HIVEMEM_REFLECTION__LOCK_LEASE_MS": "Lease of a session's reflection lock (renewed while a job runs).",
    "HIVEMEM_REFLECTION__LOCK_WAIT_S": "How long a job waits for the session's reflection lock.",
    "HIVEMEM_REFLECTION__JOB_TIMEOUT_S": "rq's timeout of one reflection job.",
    "HIVEMEM_REFLECTION__RETRIES": "rq retries of a failed reflection job.",
    "HIVEMEM_REFLECTION__RETRY_INTERVALS_S": "Seconds before each of those retries.",
    "HIVEMEM_COMPACTION__MERGE": "Merge near-duplicate facts.",
    "HIVEMEM_COMPACTION__MERGE_THRESHOLD": "Cosine (on stored vectors) at which facts of one kind merge.",
    "HIVEMEM_COMPACTION__ARCHIVE_STALE": "Archive stale facts (see `stale_above`).",
    "HIVEMEM_COMPACTION__STALE_AFTER_DAYS": "An unconfirmed fact older than this may be archived as stale.",
    "HIVEMEM_COMPACTION__ARCHIVE_BELOW": "... when its value (confidence, times stated, age) fell below this.",
    "HIVEMEM_COMPACTION__HALF_LIFE_DAYS": "Half-life of a fact's value with age.",
    "HIVEMEM_COMPACTION__MAX_ACTIVE_FACTS": "Beyond this the lowest-valued active facts are archived.",
    "HIVEMEM_COMPACTION__ASSIGN_LAYERS": "Assign memory layers (operational, episodic, semantic, working, short_term).",
    "HIVEMEM_COMPACTION__DURABLE_CONFIDENCE": "... or this confident (then the fact is `semantic`).",
    "HIVEMEM_API__HOST": "Address `hivemem serve` listens on (beyond loopback it warns: put TLS in front).",
    "HIVEMEM_API__PORT": "Port of `hivemem serve`.",
    "HIVEMEM_API__MAX_BATCH": "Turns per `POST /v1/turns/batch`.",
    "HIVEMEM_LLM__PROVIDER": "`openai` (any OpenAI-compatible server) or `anthropic`; unset: the heuristic reflector.",
    "HIVEMEM_LLM__MODEL": "The model name the server knows.",
    "HIVEMEM_LLM__API_KEY": "OpenAI / Anthropic key; never logged or traced.",
    "HIVEMEM_LLM__TIMEOUT_S": "Seconds per request (scaled up with the expected output).",
    "HIVEMEM_LLM__MAX_RETRIES": "Retries of a 429, 5xx or timeout before the job fails.",
    "HIVEMEM_LLM__BACKOFF_INITIAL_S": "First wait between those retries (a Retry-After is honoured).",
    "HIVEMEM_LLM__BACKOFF_MAX_S": "Longest wait between those retries.",
    "HIVEMEM_LLM__TEMPERATURE": "Sampling temperature.",
    "HIVEMEM_LLM__MAX_TOKENS": "Most tokens of one answer.",
}


@dataclass(frozen=True)
class SettingDoc:
    """One leaf setting: its environment variable, default and description."""

    env: str
    default: str
    description: str


@dataclass(frozen=True)
class SectionDoc:
    """One nested settings model (`redis`, `qdrant.index`, ...) and its leaf settings."""

    path: str
    summary: str
    settings: tuple[SettingDoc, ...]


def field_comments(model: type[BaseModel]) -> dict[str, str]:
    """Field name -> the comment above its definition (or after it), from the source.

    Inherited fields get the comments of the class that defines them.
    """
    comments: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls is BaseModel:
            continue
        if cls.__module__ != model.__module__:
            continue
        comments.update(_class_comments(cls))
    return comments


def _class_comments(cls: type) -> dict[str, str]:
    _, first = inspect.getsourcelines(cls)
    module_lines = Path(inspect.getsourcefile(cls) or "").read_text().splitlines()
    tree = ast.parse(inspect.getsource(cls))
    class_node = tree.body[0]
    assert isinstance(class_node, ast.ClassDef)
    found: dict[str, str] = {}
    for node in class_node.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        line = first + node.lineno - 2  # 0-based index of the field's first line
        above: list[str] = []
        index = line - 1
        while index >= 0 and module_lines[index].strip().startswith("#"):
            text = module_lines[index].strip().lstrip("#").strip()
            if set(text) <= set("-") or text.startswith("--"):
                break  # a section rule such as "# -- server only ----"
            above.insert(0, text)
            index -= 1
        trailing = _trailing_comment(module_lines[first + node.end_lineno - 2]
                                     if node.end_lineno else "")
        text = " ".join(above + ([trailing] if trailing else []))
        found[node.target.id] = text
    return found


def _trailing_comment(line: str) -> str:
    quoted: str | None = None
    for index, char in enumerate(line):
        if quoted:
            if char == quoted:
                quoted = None
        elif char in "\"'":
            quoted = char
        elif char == "#":
            return line[index + 1:].strip()
    return ""


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """The settings model a field holds (also through `X | None`), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, types.UnionType):
        models = [arg for arg in get_args(annotation) if isinstance(arg, type)
                  and issubclass(arg, BaseModel)]
        if len(models) == 1:
            return models[0]
    return None


def _show_default(value: Any) -> str:
    if value is PydanticUndefined:
        return "(required)"
    if value is None:
        return "unset"
    if isinstance(value, SecretStr):
        return "(secret)"
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value))
    if isinstance(value, Path):
        return str(value)
    return str(value)


def sections(model: type[BaseModel] = config.Settings, path: str = "") -> list[SectionDoc]:
    """Every settings model under `model`, depth first, each with its leaf settings."""
    comments = field_comments(model)
    leaves: list[SettingDoc] = []
    nested: list[SectionDoc] = []
    for name, info in model.model_fields.items():
        dotted = f"{path}.{name}" if path else name
        child = _nested_model(info.annotation)
        if child is not None:
            nested.extend(sections(child, dotted))
            continue
        default = info.get_default(call_default_factory=True)
        env = ENV_PREFIX + dotted.upper().replace(".", NESTING)
        described = comments.get(name) or DESCRIBED_HERE.get(env, "")
        leaves.append(SettingDoc(env, _show_default(default), described))
    own_doc = model.__dict__.get("__doc__") or ""
    summary = " ".join(inspect.cleandoc(own_doc).split()) if path else ""
    own = [SectionDoc(path or "top level", summary, tuple(leaves))] if leaves else []
    return own + nested


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    """The whole page as Markdown."""
    lines = [
        "# Configuration",
        "",
        "<!-- Generated by `python -m hivemem.config_doc > docs/configuration.md` from",
        "     hivemem/config.py; edit the comments there, not this page. -->",
        "",
        "One `Settings` object (pydantic-settings), built by the entry point and passed down.",
        "Environment variables use the prefix `HIVEMEM_` and `__` for nesting:",
        "`HIVEMEM_REDIS__URL=redis://cache:6379/0`, `HIVEMEM_EMBEDDING__BATCH_SIZE=128`.",
        "A list takes JSON (`HIVEMEM_REFLECTION__RETRY_INTERVALS_S='[5, 30]'`). The `llm` section",
        "is unset by default (the heuristic reflector runs); setting its provider, base URL and",
        "model turns it on. A workspace (`hivemem init`) keeps its embedder in",
        "`.hivemem/config.json`.",
        "",
    ]
    for section in sections():
        title = section.path if section.path == "top level" else f"`{section.path}`"
        lines.append(f"## {title}")
        lines.append("")
        if section.summary:
            lines.extend([section.summary, ""])
        lines.append("| variable | default | what it does |")
        lines.append("|---|---|---|")
        for setting in section.settings:
            lines.append(f"| `{setting.env}` | `{_cell(setting.default)}` | "
                         f"{_cell(setting.description)} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(), end="")
