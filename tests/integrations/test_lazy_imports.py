"""`import hivemem` and `import hivemem.integrations` load no framework: each adapter
module loads its own, only when it is imported."""

from __future__ import annotations

import subprocess
import sys

FRAMEWORKS = ("langgraph", "langchain_core", "agents", "google.adk", "crewai", "llama_index")


def test_the_package_loads_no_framework() -> None:
    code = ("import sys, hivemem, hivemem.integrations, hivemem.integrations.handle\n"
            f"print(sorted(m for m in {FRAMEWORKS!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=120)
    assert done.stdout.strip() == "[]"
