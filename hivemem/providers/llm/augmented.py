"""An LLM beside the deterministic reflector: the rules' facts always, the LLM's on top.

Small local models miss updates, copy the prompt and invent facts; the deterministic
reflector does not. `AugmentedReflector` asks both about the same episode and hands
consolidation the two action lists apart (`AugmentedResult`), so the LLM's actions are
planned on top of the rules' (`hivemem.domain.augment.plan_with_additions`): they may add
facts, never undo what the change rules decided. This is what a configured LLM does
(`reflector_for`); `build_reflector` gives the bare LLM reflector.
"""

from __future__ import annotations

import structlog
from pydantic import Field

from hivemem.domain.fact import FactAction
from hivemem.errors import ProviderError
from hivemem.providers.reflector import ReflectionRequest, ReflectionResult, Reflector

__all__ = ["AugmentedReflector", "AugmentedResult"]

log = structlog.get_logger(__name__)


class AugmentedResult(ReflectionResult):
    """`actions` are the LLM's; `rule_actions` the deterministic reflector's."""

    rule_actions: list[FactAction] = Field(default_factory=list)
    rules: str = ""  # the deterministic reflector's name


class AugmentedReflector:
    def __init__(self, llm: Reflector, rules: Reflector) -> None:
        self.llm = llm
        self.rules = rules
        self.name = f"{llm.name}+{rules.name}"

    def reflect(self, request: ReflectionRequest) -> AugmentedResult:
        """The rules first (cheap, deterministic). A transient LLM failure (`RetryLater`)
        propagates, so the job retries as without the rules; a permanent one
        (`ProviderError`: an unusable reply after the repair round, a 4xx) leaves the rules'
        actions alone, with the error in `dropped`: the LLM only ever adds, so failing the
        episode would lose the facts the rules found in it."""
        rules = self.rules.reflect(request)
        try:
            result = self.llm.reflect(request)
        except ProviderError as exc:
            log.warning("llm.failed_rules_kept", reflector=self.llm.name, error=str(exc)[:300])
            return AugmentedResult(
                actions=[], raw_output=getattr(exc, "raw_output", None),
                dropped=[*rules.dropped, f"llm failed: {str(exc)[:300]}"],
                rule_actions=rules.actions, rules=self.rules.name,
            )
        return AugmentedResult(
            actions=result.actions, raw_output=result.raw_output, model=result.model,
            dropped=[*rules.dropped, *result.dropped], rule_actions=rules.actions,
            rules=self.rules.name,
        )

    def close(self) -> None:
        close = getattr(self.llm, "close", None)
        if callable(close):
            close()
