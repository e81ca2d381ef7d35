"""Kept for bench/change_mneno.py until the lead folds it into bench/adapters/mneno.py."""

from adapters.mneno import FastEmbedProvider

__all__ = ["FastEmbedProvider"]
