"""Drop-in adapters for agent frameworks, each a thin layer over a scoped hivemem handle
(`MemoryClient.local(...).scoped(...)` or `hivemem.connect(...)`).

One module per framework; each imports its framework at module level, so import the one
you use (``from hivemem.integrations.langgraph import HivememStore``) after installing its
extra (``pip install "hivemem[langgraph]"``). Importing this package loads none of them.
"""
