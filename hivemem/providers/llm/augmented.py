"""An LLM beside the deterministic reflector: the rules' facts always, the LLM's on top.

Small local models miss updates, copy the prompt and invent facts; the deterministic
reflector does not. `AugmentedReflector` asks both about the same episode and hands
consolidation the two action lists apart (`AugmentedResult`), so the LLM's actions are
planned on top of the rules' (`hivemem.domain.augment.plan_with_additions`): they may add
facts, never undo what the change rules decided. This is what a configured LLM does
(`reflector_for`); `build_reflector` gives the bare LLM reflector.
"""

from __future__ import annotations

from pydantic import Field

from hivemem.domain.fact import FactAction
from hivemem.providers.reflector import ReflectionRequest, ReflectionResult, Reflector

__all__ = ["AugmentedReflector", "AugmentedResult"]


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
        """The rules first (cheap, deterministic); the LLM's failures propagate as they are
        (`RetryLater`, `ProviderError`), so retries and failed traces work as without it."""
        rules = self.rules.reflect(request)
        result = self.llm.reflect(request)
        return AugmentedResult(
            actions=result.actions, raw_output=result.raw_output, model=result.model,
            dropped=[*rules.dropped, *result.dropped], rule_actions=rules.actions,
            rules=self.rules.name,
        )

    def close(self) -> None:
        close = getattr(self.llm, "close", None)
        if callable(close):
            close()
