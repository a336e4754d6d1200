"""Open rendered notebooks in headless Chromium: screenshot each page and list every network request.

    python scripts/check_html.py outputs/<run-id> [--out DIR] [--chromium /usr/bin/chromium]

Why: the HTML files are meant to be shared and opened offline. A page that loads a chart library
from a CDN looks fine on a connected laptop and is blank on a plane. Chromium is pointed at a
local logging proxy, so any http(s) request the page makes (scripts, fonts, images) is recorded
and reported instead of silently succeeding or failing. Screenshots go to ``--out`` (default:
``<run dir>/screenshots``) to be looked at: charts drawn, no dead widgets.

Needs Chromium (Debian: ``apt-get install chromium``). Exit code 1 if any page made a request.
"""

from __future__ import annotations

import argparse
import http.server
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--disable-domain-reliability", "--disable-client-side-phishing-detection", "--no-default-browser-check",
         "--disable-features=Translate,OptimizationHints,MediaRouter,NetworkTimeServiceQuerying"]


# Chromium's own service pings (sign-in, push messaging, updates), made with or without a page
BROWSER_HOSTS = {"accounts.google.com", "www.google.com", "clients2.google.com", "android.clients.google.com",
                 "update.googleapis.com", "optimizationguide-pa.googleapis.com", "content-autofill.googleapis.com"}


class LoggingProxy(http.server.BaseHTTPRequestHandler):
    """Records every request (CONNECT for https) and refuses it."""

    seen: list[str] = []

    def _refuse(self) -> None:
        LoggingProxy.seen.append(f"{self.command} {self.path}")
        self.send_error(403, "offline check: no network")

    do_GET = do_POST = do_HEAD = do_CONNECT = _refuse  # noqa: N815

    def log_message(self, *args) -> None:  # quiet
        pass


def host_of(request: str) -> str:
    """'CONNECT host:443' or 'GET http://host/path' -> host."""
    target = request.split(" ", 1)[1]
    return target.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]


def start_proxy() -> tuple[http.server.ThreadingHTTPServer, int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), LoggingProxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def screenshot(chromium: str, page: Path, png: Path, port: int, height: int) -> None:
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([chromium, *FLAGS, f"--user-data-dir={profile}", f"--proxy-server=http://127.0.0.1:{port}",
                        "--proxy-bypass-list=<-loopback>", f"--window-size=1280,{height}",
                        "--virtual-time-budget=5000", f"--screenshot={png}", page.resolve().as_uri()],
                       check=True, capture_output=True, timeout=120)


CONTROL = '<html><body><script src="https://cdn.jsdelivr.net/npm/vega@5"></script></body></html>'


def page_requests(chromium: str, page, out: Path, port: int, png: Path | None = None, height: int = 200) -> list[str]:
    """Requests a page made (the browser's own pings left out); ``page`` is a path or HTML text."""
    if isinstance(page, str):
        control = out / "control.html"
        control.write_text(page)
        page = control
    LoggingProxy.seen = []
    screenshot(chromium, page, png or out / "control.png", port, height)
    if png is None:
        (out / "control.png").unlink()
        page.unlink()
    return [r for r in LoggingProxy.seen if host_of(r) not in BROWSER_HOSTS]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--chromium", default="chromium")
    parser.add_argument("--height", type=int, default=6000, help="page height to capture (px)")
    args = parser.parse_args(argv)
    pages = sorted(args.run_dir.glob("*.html"))
    if not pages:
        print(f"no .html files in {args.run_dir}", file=sys.stderr)
        return 2
    out = args.out or args.run_dir / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    server, port = start_proxy()
    if not page_requests(args.chromium, CONTROL, out, port):  # the check itself must see a CDN script
        print("the proxy saw no request from a page that loads a CDN script: the check is broken", file=sys.stderr)
        return 2
    failed = False
    for page in pages:
        png = out / f"{page.stem}.png"
        requests = page_requests(args.chromium, page, out, port, png, args.height)
        failed |= bool(requests)
        print(f"{page.name}: {png.stat().st_size // 1024} KB screenshot, {len(requests)} network request(s)"
              + "".join(f"\n    {r}" for r in requests))
    server.shutdown()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
