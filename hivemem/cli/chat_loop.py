"""The `hivemem chat` agent loop: recall, answer with an LLM, remember both sides.

Per user message: recall the session's context for it (before the message itself is stored,
so it cannot recall itself), ingest the message, ask the model with the conversation so far
(the newest turns within `history_tokens`, `hivemem.cli.chat_history`) as its messages and
the recalled context the window does not already hold in the system prompt, ingest the
answer. A resumed session starts with its stored recent turns. Slash commands inspect and
steer the memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import structlog
from rich.console import Console
from rich.markup import escape

from hivemem.cli.chat_history import DEFAULT_HISTORY_TOKENS, Conversation
from hivemem.cli.output import facts_table, items_table
from hivemem.cli.recall_view import RecallView, recall_view
from hivemem.domain.models import ContextItem, SessionStats
from hivemem.errors import (
    HivememError,
    NotFound,
    ProcessingTimeout,
    ProviderError,
    ValidationError,
)
from hivemem.producer.client import MemoryClient
from hivemem.providers.chat import ChatModel

log = structlog.get_logger(__name__)

SYSTEM_PROMPT = """\
You are a helpful assistant with a long-term memory of this conversation. The messages are \
the conversation so far (its most recent part). The memory below was recalled for the \
user's latest message, most relevant first: earlier turns that are no longer in the \
messages, and facts distilled from the conversation. Use it when it helps; if it does not \
answer the question, say you do not know rather than guessing. Answer the latest message \
once; do not repeat earlier answers.

Memory:
{memory}"""

HELP = """\
/stats            turns, episodes, facts and queues of this session
/recall <query>   what memory recalls for a query (scores and why)
/episode          close the current episode (reflection distils it into facts)
/facts            the session's current facts
/debug            show or hide the recalled context before every answer
/help             this list
/quit             leave (also /exit or Ctrl-D); the session's memory stays"""


def render_memory(items: list[ContextItem]) -> str:
    if not items:
        return "(nothing yet)"
    lines = []
    for item in items:
        who = item.agent_id or (item.role.value if item.role else item.source_type)
        label = f"fact ({item.metadata.get('kind', 'fact')})" if item.source_type == "fact" \
            else who
        lines.append(f"- [{label}] {item.content}")
    return "\n".join(lines)


@dataclass
class ChatLoop:
    client: MemoryClient
    model: ChatModel
    session_id: str
    console: Console
    read_line: Callable[[], str | None]
    token_budget: int | None = None
    debug: bool = False
    reflect_timeout_s: float = 60.0
    history_tokens: int = DEFAULT_HISTORY_TOKENS
    conversation: Conversation = field(init=False)

    def __post_init__(self) -> None:
        self.conversation = Conversation(self.history_tokens)

    def run(self) -> None:
        self.greet()
        while True:
            self.console.print("[bold cyan]you>[/] ", end="")
            line = self.read_line()
            if line is None:  # end of input
                self.console.print()
                break
            text = line.strip()
            if not text:
                continue
            if text.startswith("/"):
                if not self.command(text):
                    break
                continue
            self.turn(text)
        self.console.print(f"bye: session {self.session_id} is remembered.")

    def greet(self) -> None:
        try:
            stats: SessionStats | None = self.client.get_session_stats(self.session_id)
            facts = len(self.client.facts(self.session_id))
        except NotFound:  # a new session
            stats, facts = None, 0
        if stats is not None and stats.turns_enqueued:
            window = self.client.settings.ingest.recent_window
            self.conversation = Conversation.resumed(
                self.client.recent_turns(self.session_id, limit=window), self.history_tokens)
            self.console.print(
                f"Resuming session [bold]{escape(self.session_id)}[/]: {stats.turns_enqueued} "
                f"turns, {stats.episodes} episodes, {facts} facts remembered."
            )
        else:
            self.console.print(f"New session [bold]{escape(self.session_id)}[/].")
        self.console.print(f"Model {escape(self.model.name)}. /help lists the commands.")

    # -- a conversation turn -------------------------------------------------------------

    def turn(self, text: str) -> None:
        try:
            view = recall_view(self.client, self.session_id, text, self.token_budget)
        except NotFound:  # the input is fine: a new session has nothing to recall yet
            view = RecallView(session_id=self.session_id, query=text, items=[], used_tokens=0,
                              token_budget=self.token_budget
                              or self.client.settings.recall.default_token_budget)
        except ValidationError as exc:
            self.console.print(f"[red]{escape(str(exc))}[/]")
            return
        if self.debug:
            self.show_recall(view, "recalled for this answer")
        asked = self.client.ingest(self.session_id, "user", text, agent_id="user",
                                   metadata={"source": "chat"})
        messages, in_window = self.conversation.window(then=text)
        self.conversation.add("user", text, asked.turn_id)
        recalled = [i for i in view.items
                    if not (i.source_type == "turn" and i.source_id in in_window)]
        system = SYSTEM_PROMPT.format(memory=render_memory(recalled))
        try:
            answer = self.model.complete(system, messages)
        except (ProviderError, HivememError) as exc:
            log.warning("chat.llm_failed", error=str(exc))
            self.console.print(f"[red]the model did not answer:[/] {escape(str(exc))}")
            return
        if not answer:
            self.console.print("[yellow](the model returned an empty answer)[/]")
            return
        said = self.client.ingest(self.session_id, "assistant", answer, agent_id="assistant",
                                  metadata={"source": "chat"})
        self.conversation.add("assistant", answer, said.turn_id)
        self.console.print(f"[bold green]assistant>[/] {escape(answer)}")

    def show_recall(self, view: RecallView, title: str) -> None:
        self.console.print(
            f"[dim]{title}: {view.used_tokens}/{view.token_budget} tokens, "
            f"{len(view.items)} items[/]"
        )
        if view.items:
            self.console.print(items_table(view.query, view.items))

    # -- slash commands ------------------------------------------------------------------

    def command(self, text: str) -> bool:
        """Run a slash command; False means leave."""
        name, _, arg = text.partition(" ")
        name = name.lower()
        if name in ("/quit", "/exit", "/q"):
            return False
        if name == "/help":
            self.console.print(escape(HELP))
        elif name == "/debug":
            self.debug = not self.debug
            self.console.print(f"debug {'on' if self.debug else 'off'}")
        elif name == "/stats":
            self.stats()
        elif name == "/recall":
            if not arg.strip():
                self.console.print("usage: /recall <query>")
            else:
                self.show_recall(recall_view(self.client, self.session_id, arg.strip(),
                                             self.token_budget), "recall")
        elif name == "/episode":
            self.close_episode()
        elif name == "/facts":
            facts = self.client.facts(self.session_id)
            if facts:
                self.console.print(facts_table(f"facts of {self.session_id}", facts))
            else:
                self.console.print("no facts yet (/episode closes an episode for reflection)")
        else:
            self.console.print(f"unknown command {escape(name)}; /help lists them")
        return True

    def stats(self) -> None:
        s = self.client.get_session_stats(self.session_id)
        facts = self.client.facts(self.session_id)
        lag = ", ".join(f"{x.stage} lag {x.lag} pending {x.pending}" for x in s.stages)
        markers = ", ".join(f"{k} {v}" for k, v in sorted(s.markers.items())) or "none"
        self.console.print(
            f"session {escape(self.session_id)}: {s.turns_enqueued} turns "
            f"({s.turns_pending} pending), {s.episodes} episodes, "
            f"{s.open_episode_turns} turns in the open episode, {len(facts)} facts; "
            f"markers {markers}; {lag}"
        )

    def close_episode(self) -> None:
        try:
            self.client.close_episode(self.session_id)
        except ValidationError as exc:
            self.console.print(f"nothing to close: {escape(exc.message)}")
            return
        before = len(self.client.facts(self.session_id))
        try:
            self.client.wait_until_processed(self.session_id, self.reflect_timeout_s,
                                             stage="boundary")
            self.client.wait_until_reflected(self.session_id, self.reflect_timeout_s)
        except ProcessingTimeout:
            self.console.print("episode closed; reflection is still queued (are the "
                               "workers running?)")
            return
        after = len(self.client.facts(self.session_id))
        self.console.print(f"episode closed and reflected: {after} facts "
                           f"({after - before:+d}).")
