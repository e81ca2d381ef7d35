"""Identifiers: the one pattern every session, turn, agent, namespace and fact id follows."""

from __future__ import annotations

import re

from hivemem.errors import ValidationError

# "." and ".." match the characters but no URL can carry them as a path segment (clients and
# proxies resolve them away: /v1/sessions/../stats is /v1/stats), so no route could name
# such a session or fact: refused on every way in, like any other malformed id. Spelled
# without look-around, which JSON Schema validators and pydantic's regex engine lack: a
# first character that is not a dot; or one dot and a second that is not; or two dots and
# at least one character more.
ID_PATTERN = re.compile(
    r"^(?:[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,127}|\.[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,126}"
    r"|\.\.[A-Za-z0-9._:-]{1,126})$")
ID_RULE = "must match [A-Za-z0-9._:-]{1,128} and not be '.' or '..'"


def check_id(field: str, value: object) -> str:
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, got {type(value).__name__}")
    if not ID_PATTERN.fullmatch(value):
        raise ValidationError(field, ID_RULE)
    return value
