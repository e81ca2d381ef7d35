"""The store's Lua scripts are files (hivemem/store/lua/*.lua), shipped as package data."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

import redis

from hivemem.store.scripts import lua

REPO = Path(__file__).resolve().parents[2]
LUA = REPO / "hivemem" / "store" / "lua"
NAMES = sorted(p.stem for p in LUA.glob("*.lua"))


def test_every_script_loads_on_a_server(redis_client: redis.Redis) -> None:
    for name in NAMES:
        sha = redis_client.script_load(lua(name))
        assert redis_client.script_exists(sha) == [True], name


def test_the_header_comment_stays_out_of_what_the_server_runs() -> None:
    for name in NAMES:
        text = (LUA / f"{name}.lua").read_text(encoding="utf-8")
        assert text.startswith("-- "), f"{name}.lua: no header saying what it does"
        code = lua(name)
        assert not code.startswith("--") and code.strip(), name
        assert text.endswith(code), name


def test_a_script_of_several_files_is_them_in_order() -> None:
    assert lua("renew_lease", "release_lease") == lua("renew_lease") + lua("release_lease")


def test_every_file_is_used_and_no_lua_is_left_in_python() -> None:
    sources = {p: p.read_text(encoding="utf-8") for p in (REPO / "hivemem").rglob("*.py")}
    named = set()
    for text in sources.values():
        for call in re.findall(r"\blua\(([^)]*)\)", text):
            named.update(re.findall(r'"([a-z_]+)"', call))
    assert named == set(NAMES)
    assert [p.name for p, t in sources.items() if "redis.call(" in t] == []


def test_the_files_ship_as_package_data() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    globs = pyproject["tool"]["setuptools"]["package-data"]["hivemem"]
    for name in NAMES:
        path = f"store/lua/{name}.lua"
        assert any(fnmatch.fnmatch(path, g) for g in globs), path
