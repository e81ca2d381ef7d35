"""`hivemem chat --session S`: talk to an LLM that remembers, on the workspace's memory."""

from __future__ import annotations

import sys

import click

from hivemem.cli.target import default_session, resolve_target, server_options
from hivemem.cli.workspace import Opened, checked, stdout
from hivemem.config import Settings
from hivemem.domain.turn import check_id

NO_LLM = """\
hivemem chat needs a chat model, and none is configured. Point it at any OpenAI-compatible
server (Ollama, vLLM, llama.cpp server, OpenAI) or Anthropic, e.g.:

  export HIVEMEM_LLM__PROVIDER=openai
  export HIVEMEM_LLM__BASE_URL=http://127.0.0.1:11434/v1    # Ollama
  export HIVEMEM_LLM__MODEL=llama3.1
  export HIVEMEM_LLM__API_KEY=...                           # OpenAI / Anthropic only

The same model then also reflects closed episodes into facts."""


@click.command()
@click.option("--session", default=None, help="Session id (default: the workspace's); "
              "an existing session resumes with its memory.")
@click.option("--budget", type=click.IntRange(min=1), default=None,
              help="Token budget of the recalled context (default from config).")
@click.option("--debug", is_flag=True, help="Show the recalled context before every answer.")
@server_options
@click.pass_context
def chat(
    ctx: click.Context, session: str | None, budget: int | None, debug: bool,
    redis_url: str | None, qdrant_url: str | None,
) -> None:
    """An agent loop with memory: recall, answer, remember both sides.

    Exits with 0 and instructions when no LLM is configured (HIVEMEM_LLM__*).
    """
    from hivemem.cli.chat_loop import ChatLoop
    from hivemem.providers.chat import ChatModel

    settings: Settings = ctx.obj["settings"]
    console = stdout()
    if settings.llm is None:
        console.print(NO_LLM, markup=False)
        return
    if session is not None:
        checked("--session", lambda v: check_id("session", v), session)
    target = resolve_target(ctx, redis_url, qdrant_url)
    session_id = default_session(target, session)
    def read_line() -> str | None:
        line = sys.stdin.readline()
        return line if line else None

    with ChatModel(settings.llm) as model, Opened(target) as client:
        ChatLoop(client, model, session_id, console, read_line, token_budget=budget,
                 debug=debug).run()
