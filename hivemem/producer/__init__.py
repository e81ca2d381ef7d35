"""The producer SDK: validate and enqueue turns; serve recall."""
