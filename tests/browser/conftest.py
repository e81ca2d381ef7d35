"""Browser tests: a real Chromium (Debian's `chromium`, driven by Playwright through its
`executable_path`; no browser is downloaded) against a served embedded store.

Without chromium or Playwright the tests using `page` are skipped with the reason, except
in CI (CI=true), where .ci/run installs both and a missing one is a failure.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from browser.served_store import Served, served_store

CHROMIUM = os.environ.get("HIVEMEM_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# Where the page screenshots go: a temporary folder unless asked for the docs' copies
# (HIVEMEM_UI_SCREENSHOTS=docs/screenshots), so that a test run leaves the tree clean.
SHOTS_ENV = "HIVEMEM_UI_SCREENSHOTS"
VIEWPORT = {"width": 1366, "height": 820}  # a laptop screen


def _missing() -> str | None:
    if not Path(CHROMIUM).exists():
        return (f"chromium not found at {CHROMIUM}: apt-get install chromium chromium-driver"
                " (.ci/run installs it)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed: pip install -e '.[browser]'"
    return None


# Module scope, not session: Playwright's sync API runs an event loop in this thread for as
# long as it is open, and a test of another module that calls asyncio.run() on the same xdist
# worker would fail with "cannot be called from a running event loop".
@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    reason = _missing()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
        browser = driver.chromium.launch(executable_path=CHROMIUM,
                                         args=["--no-sandbox", "--disable-gpu"])
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def served() -> Iterator[Served]:
    with tempfile.TemporaryDirectory(prefix="hivemem-ui-") as folder, \
            served_store(Path(folder)) as store:
        yield store


@pytest.fixture
def page(chromium: Any, served: Served) -> Iterator[Any]:
    """A fresh tab (its own sessionStorage) on the explorer, nobody signed in."""
    context = chromium.new_context(viewport=VIEWPORT)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    tab.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    tab.goto(f"{served.url}/ui/")
    yield tab
    context.close()
    # A refused key (401/403/404 in a test that expects it) logs a failed fetch: only
    # script errors and policy violations count.
    assert not [e for e in errors if "Failed to load resource" not in e], errors


@pytest.fixture(scope="session")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chosen = os.environ.get(SHOTS_ENV)
    folder = Path(chosen) if chosen else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder
