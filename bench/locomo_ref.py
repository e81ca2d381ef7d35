"""Kept for bench/change_gleanr.py and change_mneno.py until the lead folds them into
bench/adapters/ (the helpers live in bench/adapters/reference.py)."""

from adapters.reference import (
    FastEmbedModel,
    Timer,
    hivemem_estimate_tokens,
    load_job,
    log,
    write_out,
)

__all__ = ["FastEmbedModel", "Timer", "hivemem_estimate_tokens", "load_job", "log", "write_out"]
