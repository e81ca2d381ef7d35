"""`hivemem chat --session S`: talk to an LLM that remembers, on the workspace's memory."""

from __future__ import annotations

import sys

import click

from hivemem.cli.chat_history import DEFAULT_HISTORY_TOKENS
from hivemem.cli.chat_loop import ChatLoop
from hivemem.cli.output import stdout
from hivemem.cli.session_args import session_option
from hivemem.cli.target import Target, opened, with_target
from hivemem.providers.chat import ChatModel

NO_LLM = """\
hivemem chat needs a chat model, and none is configured. Point it at any OpenAI-compatible
server (Ollama, vLLM, llama.cpp server, OpenAI) or Anthropic, e.g.:

  export HIVEMEM_LLM__PROVIDER=openai
  export HIVEMEM_LLM__BASE_URL=http://127.0.0.1:11434/v1    # Ollama
  export HIVEMEM_LLM__MODEL=llama3.1
  export HIVEMEM_LLM__API_KEY=...                           # OpenAI / Anthropic only

The same model then also reflects closed episodes into facts."""


@click.command()
@session_option("Session id (default: the workspace's default session, else `default`);"
                " an existing session resumes with its memory.")
@click.option("--budget", type=click.IntRange(min=1), default=None,
              help="Token budget of the recalled context (default from config).")
@click.option("--history", "history_tokens", type=click.IntRange(min=0),
              default=DEFAULT_HISTORY_TOKENS, show_default=True,
              help="Token budget of the conversation so far sent with every message.")
@click.option("--debug", is_flag=True, help="Show the recalled context before every answer.")
@with_target
def chat(target: Target, session: str | None, budget: int | None, history_tokens: int,
         debug: bool) -> None:
    """An agent loop with memory: recall, answer, remember both sides.

    Exits with 0 and instructions when no LLM is configured (HIVEMEM_LLM__*).
    """
    settings = target.settings
    console = stdout()
    if settings.llm is None:
        console.print(NO_LLM, markup=False)
        return
    session_id = target.default_session(session)

    def read_line() -> str | None:
        line = sys.stdin.readline()
        return line if line else None

    with ChatModel(settings.llm) as model, opened(target) as client:
        ChatLoop(client, model, session_id, console, read_line, token_budget=budget,
                 debug=debug, history_tokens=history_tokens).run()
