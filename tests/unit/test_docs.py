"""Every code block in README.md and docs/*.md runs here, or says why it cannot.

- ```python blocks run in order, one page at a time, in one namespace (a page reads as one
  session), in a temporary folder, on the embedded mode with the hashing embedder (pages in
  `MODEL_PAGES` use the real model from FASTEMBED_CACHE_PATH and are marked `model`).
- ```bash / ```console blocks are command lines: each `hivemem ...` line runs through the
  real command tree (click's runner, in-process) in a temporary workspace shared by the
  page; `export X=Y` and `X=Y hivemem ...` set the environment. Once the workspace exists,
  the test holds its folder open as the owner (as `hivemem serve` would), so every command
  is a guest of it: the documented CLI-beside-a-server set-up, and ~0.1 s a command instead
  of starting the folder's Redis server each time.
- A block that cannot run here (docker compose, pip install, a server on another host)
  carries `<!-- not run: reason -->` on the line right above its fence. For those the test
  checks what it can: the repository files they name exist, and every `hivemem` subcommand
  they name is a real one.
- docs/configuration.md is what `python -m hivemem.config_doc` prints.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from hivemem import MemoryClient, config_doc
from hivemem.cli.main import cli
from hivemem.config import Settings

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = {"python", "bash", "console"}
# Pages whose examples need the real model (they show what the embedding finds).
MODEL_PAGES: set[str] = set()
NOT_RUN = re.compile(r"^<!-- not run: (?P<reason>.+?) -->$")
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w+-]*)\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int             # 1-based line of the opening fence
    lang: str
    text: str
    not_run: str | None   # the reason, when marked

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of a Markdown page, with the `not run` mark above each."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent = len(opening["indent"])
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        body = "\n".join(line[indent:] for line in lines[index + 1:end])
        above = lines[index - 1].strip() if index > 0 else ""
        mark = NOT_RUN.match(above)
        found.append(Block(page, index + 1, opening["lang"], body + "\n",
                           mark["reason"] if mark else None))
        index = end + 1
    return found


ALL_BLOCKS = [block for page in PAGES for block in blocks(page)]


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


# -- every block is run or marked ------------------------------------------------------------


def test_the_pages_have_blocks() -> None:
    assert (ROOT / "docs" / "README.md").exists()
    assert len(ALL_BLOCKS) > 20


def test_every_block_is_run_or_marked() -> None:
    unmarked = [f"{b.where} ({b.lang or 'no language'})" for b in ALL_BLOCKS
                if b.not_run is None and b.lang not in RUNNABLE]
    assert not unmarked, (
        "blocks that no test runs: mark them <!-- not run: reason --> or make them"
        f" python/bash: {unmarked}")


def test_readme_is_short() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300


def test_links_between_pages_resolve() -> None:
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if re.match(r"[a-z]+://", target):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{_page_id(page)} -> {target}")
    assert not broken, broken


# -- marked blocks: what can be checked without running them ---------------------------------

PATH_TOKEN = re.compile(
    r"(?<![\w./$<-])((?:\.ci|bench|docs|hivemem|tests|clients)/[\w./-]*[\w-]"
    r"|docker-compose[\w.-]*\.yml|pyproject\.toml)"
)


def _command_words(line: str) -> list[str] | None:
    """The words of a `hivemem ...` command line (env assignments dropped), else None."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return None
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        words = words[1:]
    if words[:1] == ["docker"] and "hivemem" in words:
        words = words[words.index("hivemem"):]
    if words[:1] != ["hivemem"]:
        return None
    return words


def _resolve(words: list[str]) -> str | None:
    """None if `hivemem WORDS` names real (sub)commands, else the first unknown one."""
    command: click.Command = cli
    args = words[1:]
    while isinstance(command, click.Group):
        while args and args[0].startswith("-"):
            option = args.pop(0)
            takes_value = option in {"--local", "--log-level"} and "=" not in option
            if takes_value and args:
                args.pop(0)
        if not args:
            return None
        name = args.pop(0)
        sub = command.commands.get(name)
        if sub is None:
            return name
        command = sub
    return None


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if b.not_run],
                         ids=lambda b: b.where)
def test_marked_block_names_real_files_and_commands(block: Block) -> None:
    assert block.not_run and len(block.not_run) > 3
    named = PATH_TOKEN.findall(block.text) + PATH_TOKEN.findall(block.not_run)
    missing = [token for token in named if not (ROOT / token).exists()]
    assert not missing, f"{block.where} names files that do not exist: {missing}"
    if block.lang in RUNNABLE:
        unknown = []
        for line in _joined_lines(block.text):
            words = _command_words(line)
            if words and (bad := _resolve(words)) is not None:
                unknown.append(f"{line!r}: no command {bad!r}")
        assert not unknown, f"{block.where}: {unknown}"


# -- bash blocks: through the real CLI -------------------------------------------------------


def _joined_lines(text: str) -> Iterator[str]:
    pending = ""
    for raw in text.splitlines():
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        line = (pending + raw).strip()
        pending = ""
        if line and not line.startswith("#"):
            yield line


@dataclass
class CliSession:
    """A page's temporary workspace and environment for its command lines."""

    runner: CliRunner
    env: dict[str, str]
    owner: MemoryClient | None = None

    def own_the_workspace(self, monkeypatch: pytest.MonkeyPatch) -> None:
        if self.owner is None and Path(".hivemem/store").exists():
            for name, value in self.env.items():
                monkeypatch.setenv(name, value)
            self.owner = MemoryClient.local(".hivemem/store")

    def close(self) -> None:
        if self.owner is not None:
            self.owner.close()

    def run(self, line: str, where: str) -> None:
        words = shlex.split(line, comments=True)
        if words[:1] == ["export"]:
            for assignment in words[1:]:
                name, _, value = assignment.partition("=")
                self.env[name] = value
            return
        env = dict(self.env)
        while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        assert words[:1] == ["hivemem"], (
            f"{where}: {line!r} is not a hivemem command: mark the block <!-- not run: ... -->")
        stdin = None
        if "-" in words[1:] and "<<<" not in line:
            stdin = "text from stdin\n"
        result = self.runner.invoke(cli, words[1:], env=env, input=stdin, catch_exceptions=True)
        if result.exit_code != 0:
            detail = result.output[-2000:]
            if result.exception is not None and not isinstance(result.exception, SystemExit):
                detail += f"\n{type(result.exception).__name__}: {result.exception}"
            pytest.fail(f"{where}: `{line}` exited {result.exit_code}:\n{detail}")


def _cli_env(page: Path) -> dict[str, str]:
    env = {"HIVEMEM_LOG_LEVEL": "warning", "COLUMNS": "160", "HF_HUB_OFFLINE": "1"}
    if page.name not in MODEL_PAGES:
        env["HIVEMEM_EMBEDDING__PROVIDER"] = "hashing"
    return env


def _pages_with(langs: set[str]) -> list[Any]:
    params = []
    for page in PAGES:
        if any(b.lang in langs and b.not_run is None for b in blocks(page)):
            marks = [pytest.mark.model] if page.name in MODEL_PAGES else []
            params.append(pytest.param(page, id=_page_id(page), marks=marks))
    return params


@pytest.mark.parametrize("page", _pages_with({"bash", "console"}))
def test_command_lines_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    workspace = tmp_path / "work"
    workspace.mkdir()
    monkeypatch.chdir(workspace)
    session = CliSession(CliRunner(), _cli_env(page))
    page_blocks = [b for b in blocks(page) if b.lang in {"bash", "console"} and not b.not_run]
    try:
        if not any("hivemem init" in b.text for b in page_blocks):
            session.run("hivemem init", f"{_page_id(page)} (set-up)")
        for block in page_blocks:
            for line in _joined_lines(block.text):
                session.own_the_workspace(monkeypatch)
                session.run(line.removeprefix("$ "), block.where)
    finally:
        session.close()


# -- python blocks: executed ----------------------------------------------------------------


@pytest.mark.parametrize("page", _pages_with({"python"}))
def test_python_blocks_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name, value in _cli_env(page).items():
        monkeypatch.setenv(name, value)
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    try:
        for block in blocks(page):
            if block.lang != "python" or block.not_run:
                continue
            code = compile(block.text, block.where, "exec")
            try:
                exec(code, namespace)  # the docs' own examples
            except Exception as exc:
                raise AssertionError(f"{block.where}: {type(exc).__name__}: {exc}") from exc
    finally:
        for value in list(namespace.values()):
            close = getattr(value, "close", None)
            if callable(close) and type(value).__module__.startswith("hivemem"):
                close()


# -- the generated configuration page --------------------------------------------------------


def test_configuration_page_is_generated_from_settings() -> None:
    committed = (ROOT / "docs" / "configuration.md").read_text()
    assert committed == config_doc.render(), (
        "docs/configuration.md is stale: python -m hivemem.config_doc > docs/configuration.md")


def test_every_setting_is_on_the_page_with_a_description() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    documented = [s for section in config_doc.sections() for s in section.settings]
    assert len(documented) > 100
    for setting in documented:
        assert f"`{setting.env}`" in page
        assert setting.description, f"{setting.env} has no description: comment its field"
    assert set(config_doc.DESCRIBED_HERE) <= {s.env for s in documented}, (
        "DESCRIBED_HERE names settings that no longer exist")


def test_the_page_reads_the_comments_and_defaults_of_config_py() -> None:
    by_env = {s.env: s for section in config_doc.sections() for s in section.settings}
    defaults = Settings()
    assert by_env["HIVEMEM_REDIS__PARTITIONS"].default == str(defaults.redis.partitions)
    assert by_env["HIVEMEM_QDRANT__INDEX__HNSW_M"].default == str(defaults.qdrant.index.hnsw_m)
    assert "Partitions per stage" in by_env["HIVEMEM_REDIS__PARTITIONS"].description
    assert by_env["HIVEMEM_LOG_JSON"].description.startswith("None: JSON")  # trailing comment
    assert by_env["HIVEMEM_REFLECTION__RETRY_INTERVALS_S"].default == "[5, 30, 120]"
    # A setting of an inherited model keeps the comment of the class that defines it.
    assert "Age alone archives nothing" in by_env["HIVEMEM_COMPACTION__STALE_ABOVE"].description
