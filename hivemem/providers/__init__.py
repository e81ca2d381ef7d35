"""Providers: embedders now; reflectors (LLMs) later."""
