"""Import for one namespace (a namespace's or an agent's API key, `POST /v1/import`): only
``append``, and only a file whose every record is the key's to write
(`hivemem.transfer.checks.check_scope`: its namespace; for an agent key, that agent or none).

``append`` writes only new things (a session id, fact id or episode that is taken anywhere
is renamed, `hivemem.transfer.importer`), so such a file adds to its namespace and can touch
nothing of another one. The other modes act on records that already exist, which may be
another namespace's: they stay operator commands (`hivemem import`, `Admin.import_file`).
"""

from __future__ import annotations

from hivemem.errors import ValidationError

SCOPED_MODES = ("append",)


def check_mode(mode: object) -> str:
    if mode not in SCOPED_MODES:
        raise ValidationError("mode", "a namespace may only append (replace, skip_existing"
                                      " and overwrite are operator commands: hivemem import)")
    return "append"
