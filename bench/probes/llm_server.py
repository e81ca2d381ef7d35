"""Launch llama-cpp-python's OpenAI-compatible server, optionally without extra buffer types.

`python -m llama_cpp.server` has no switch for llama.cpp's `use_extra_bufts` model parameter.
On CPUs with AMX, llama.cpp then puts the weights into an AMX buffer and the first request
segfaults (exit 139 right after "AMX model buffer size"); loading with extra buffer types off
avoids it. This launcher takes the model and server flags of `python -m llama_cpp.server`
(same settings objects, same app; no --config_file) plus one flag:

    --extra_bufts auto|on|off   auto (default): off when /proc/cpuinfo shows AMX, else on

Runs with the llama.cpp venv (not hivemem's): see bench/probes/llm_server.sh for the set-up.

    /work/venv-llm/bin/python bench/probes/llm_server.py --model M.gguf --host 127.0.0.1 --port 8011
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

EXTRA_BUFTS_CHOICES = ("auto", "on", "off")


def cpu_has_amx(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """True when any CPU flag starts with ``amx`` (amx_tile, amx_int8, amx_bf16, ...)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("flags"):
            flags = line.partition(":")[2].split()
            if any(flag.startswith("amx") for flag in flags):
                return True
    return False


def resolve_extra_bufts(choice: str, has_amx: bool) -> bool:
    """Whether to keep llama.cpp's extra buffer types (weight repacking, AMX) enabled."""
    if choice == "on":
        return True
    if choice == "off":
        return False
    return not has_amx


def disable_extra_bufts() -> None:
    """Make every model load in this process use ``use_extra_bufts = False``.

    `llama_cpp.Llama.__init__` starts from ``llama_cpp.llama_cpp.llama_model_default_params()``
    (looked up on the module at call time) and never touches that field, so wrapping the
    module function reaches the server's model loads without copying its loading code.
    """
    import llama_cpp.llama_cpp as lib

    original = lib.llama_model_default_params

    def default_params_without_extra_bufts() -> Any:
        params = original()
        params.use_extra_bufts = False
        return params

    lib.llama_model_default_params = default_params_without_extra_bufts


def main(argv: list[str] | None = None) -> None:
    # Imported here so that `--help` of a broken install still shows where the error is.
    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.cli import add_args_from_model, parse_model_from_args
    from llama_cpp.server.settings import ModelSettings, ServerSettings, Settings

    parser = argparse.ArgumentParser(
        description="llama-cpp-python server with a switch for llama.cpp's extra buffer types"
    )
    add_args_from_model(parser, Settings)
    parser.add_argument(
        "--extra_bufts",
        choices=EXTRA_BUFTS_CHOICES,
        default="auto",
        help="llama.cpp extra buffer types (weight repacking, AMX); auto: off on AMX CPUs",
    )
    args = parser.parse_args(argv)

    has_amx = cpu_has_amx()
    keep = resolve_extra_bufts(args.extra_bufts, has_amx)
    if not keep:
        disable_extra_bufts()
    print(
        f"llm_server: amx={has_amx} extra_bufts={'on' if keep else 'off'} "
        f"(--extra_bufts {args.extra_bufts})",
        file=sys.stderr,
        flush=True,
    )

    server_settings = parse_model_from_args(ServerSettings, args)
    model_settings = [parse_model_from_args(ModelSettings, args)]
    app = create_app(server_settings=server_settings, model_settings=model_settings)
    uvicorn.run(
        app,
        host=os.getenv("HOST", server_settings.host),
        port=int(os.getenv("PORT", server_settings.port)),
        ssl_keyfile=server_settings.ssl_keyfile,
        ssl_certfile=server_settings.ssl_certfile,
    )


if __name__ == "__main__":
    main()
