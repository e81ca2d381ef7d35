"""`hivemem ui`: the memory explorer on a local server over the resolved store.

It runs the same app as `hivemem serve` (so the page uses only the public HTTP API) on a
free loopback port, with the store opened as every CLI command opens it: the workspace's
folder (or a guest of the `hivemem serve` that owns it), `--local`, or a deployment. The
page needs an API key: the command makes a temporary namespace key, hands it to the browser
in the URL's fragment (which a browser never sends to a server; the page moves it into the
tab's sessionStorage and wipes it from the address bar at once) and revokes it on exit.
"""

from __future__ import annotations

import socket
import threading
import webbrowser

import click

from hivemem.cli.target import Target, opened, with_target
from hivemem.domain.scope import DEFAULT_NAMESPACE
from hivemem.ui import PREFIX

KEY_NAME = "hivemem ui (temporary)"
OPEN_DELAY_S = 0.5  # the page's first requests queue on the listening socket meanwhile


def _loopback_socket(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as exc:
        sock.close()
        raise click.ClickException(f"cannot listen on 127.0.0.1:{port}: {exc}") from None
    sock.listen(128)  # connections queue from now on, before the server has started
    return sock


@click.command("ui")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="Loopback port (0: a free one).")
@click.option("--namespace", default=DEFAULT_NAMESPACE, show_default=True,
              help="The namespace the page reads (its temporary key's).")
@click.option("--no-browser", is_flag=True, help="Print the address instead of opening it.")
@with_target
def ui(target: Target, port: int, namespace: str, no_browser: bool) -> None:
    """Open the memory explorer in the browser (sessions, timeline, facts, recall, pipeline)."""
    try:
        import uvicorn

        from hivemem.api import create_app
    except ImportError as exc:
        raise click.ClickException(
            f"{exc.name or 'fastapi'} is not installed: pip install 'hivemem[api]'") from None
    with opened(target) as client:
        keys = client.admin.api_keys()
        key, info = keys.create(namespace, KEY_NAME)
        try:
            sock = _loopback_socket(port)
            base = f"http://127.0.0.1:{sock.getsockname()[1]}{PREFIX}/"
            url = f"{base}#key={key}"
            click.echo(f"hivemem ui: {base} (namespace {namespace}; Ctrl-C to stop)", err=True)
            if no_browser:
                # The user's own terminal: the address with the key, to open by hand.
                click.echo(url)
            else:
                threading.Timer(OPEN_DELAY_S, webbrowser.open, [url]).start()
            config = uvicorn.Config(create_app(target.settings, client=client),
                                    log_level="warning", access_log=False)
            uvicorn.Server(config).run(sockets=[sock])
        finally:
            keys.revoke(info.key_id)


COMMANDS: tuple[click.Command, ...] = (ui,)
