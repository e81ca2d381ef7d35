"""Kept for bench/change_gleanr.py until the lead folds it into bench/adapters/gleanr.py."""

from adapters.gleanr import FastEmbedEmbedder, HivememTokenCounter

__all__ = ["FastEmbedEmbedder", "HivememTokenCounter"]
