"""Identifiers: the one pattern every session, turn, agent, namespace and fact id follows."""

from __future__ import annotations

import re

from hivemem.errors import ValidationError

ID_PATTERN = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def check_id(field: str, value: object) -> str:
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, got {type(value).__name__}")
    if not ID_PATTERN.fullmatch(value):
        raise ValidationError(field, "must match [A-Za-z0-9._:-]{1,128}")
    return value
