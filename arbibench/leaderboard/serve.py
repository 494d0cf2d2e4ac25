"""Serve a built site on 127.0.0.1 only: a preview for the person who built it, never exposed to the network."""

from __future__ import annotations

import functools
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from arbibench.leaderboard.cards import LeaderboardError

HOST = "127.0.0.1"


class _QuietHandler(SimpleHTTPRequestHandler):
    """Static files with no caching (a rebuild shows at once) and request logs only when asked for."""

    verbose = False

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        if self.verbose:
            super().log_message(format, *args)


def make_server(directory: Path | str, port: int = 8000, verbose: bool = False) -> ThreadingHTTPServer:
    """A bound (not yet serving) server for ``directory``; ``port=0`` picks a free port (see ``server_port``)."""
    directory = Path(directory)
    if not (directory / "index.html").is_file():
        raise LeaderboardError(f"{directory} holds no index.html: build the site first (arbibench leaderboard build)")
    handler = type("Handler", (_QuietHandler,), {"verbose": verbose})
    try:
        return ThreadingHTTPServer((HOST, port), functools.partial(handler, directory=str(directory.resolve())))
    except OSError as e:
        raise LeaderboardError(f"cannot listen on {HOST}:{port}: {e.strerror or e}") from None


def serve(directory: Path | str, port: int = 8000, verbose: bool = True) -> None:
    """Serve until interrupted (Ctrl-C)."""
    server = make_server(directory, port, verbose)
    print(f"serving {Path(directory)} at http://{HOST}:{server.server_port}/  (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
