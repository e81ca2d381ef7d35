"""What every suite's run records about itself, whatever it measured."""

from __future__ import annotations

from pydantic import BaseModel


class RunInfo(BaseModel):
    """The system that ran, its version, the reflector behind it and the token budget every
    recall of the run had."""

    system: str
    version: str
    reflector: str
    token_budget: int
