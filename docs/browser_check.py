"""Open the built site in headless chromium and check that its navigation and pictures render.

Serves a built site (``mkdocs build``'s ``site/``) on a loopback port, and for a few pages runs chromium
headless twice: ``--dump-dom`` (the DOM after the page loaded, scripts run) and ``--screenshot``. A page passes
when its DOM has Material's navigation with the site's sections, every ``<img>`` of its article was fetched
from the server with status 200 and is a real image of the size it says, and its screenshot is not blank::

    python docs/browser_check.py site                  # the default pages; screenshots into site-shots/
    python docs/browser_check.py site --shots DIR --page games/crafter/

Chromium: ``apt-get install -y chromium`` (Debian's package; ``$CHROMIUM`` names another binary).
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

#: Pages opened by default: the home page, every game page (pictures, tables made from the code), the results
#: (figures, wide tables), the API page.
PAGES = (
    "",
    "games/",
    "games/babyai/",
    "games/crafter/",
    "games/babaisai/",
    "games/minihack/",
    "games/nethack/",
    "games/textworld/",
    "results/",
    "api/",
)
#: Section titles the navigation must show on every page.
NAV_TITLES = ("Games", "Training", "Results", "API reference")


def chromium() -> str | None:
    """The chromium binary, or None."""
    for name in (os.environ.get("CHROMIUM", ""), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the site and records every request's path and status."""

    log: list[tuple[str, int]]

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        self.log.append((self.path.split("?")[0], int(code) if str(code).isdigit() else 0))

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass


class _Page(HTMLParser):
    """The parts of a page's DOM the check needs: nav links and the article's images."""

    def __init__(self) -> None:
        super().__init__()
        self.nav_depth = 0
        self.article_depth = 0
        self.nav_primary = False
        self.nav_text: list[str] = []
        self.images: list[dict[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = {k: v or "" for k, v in attrs}
        if tag == "nav" and "md-nav--primary" in attr.get("class", ""):
            self.nav_primary = True
            self.nav_depth = 1
        elif tag == "nav" and self.nav_depth:
            self.nav_depth += 1
        if tag == "article":
            self.article_depth += 1
        if tag == "img" and self.article_depth:
            self.images.append(attr)

    def handle_endtag(self, tag: str) -> None:
        if tag == "nav" and self.nav_depth:
            self.nav_depth -= 1
        if tag == "article" and self.article_depth:
            self.article_depth -= 1

    def handle_data(self, data: str) -> None:
        if self.nav_depth and data.strip():
            self.nav_text.append(data.strip())


@dataclass
class PageResult:
    page: str
    problems: list[str] = field(default_factory=list)
    images: int = 0
    nav_links: int = 0
    screenshot: Path | None = None


def _run(binary: str, args: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
             "--no-first-run", "--virtual-time-budget=4000", "--window-size=1400,1000"]  # fmt: skip
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [binary, *flags, f"--user-data-dir={profile}", *args],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip


def _png_size(path: Path) -> tuple[int, int] | None:
    head = path.read_bytes()[:24]
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def _not_blank(path: Path) -> bool:
    """A screenshot with a real page in it: many distinct colours, not one flat fill."""
    try:
        from PIL import Image
    except ImportError:  # no pillow: the size is all we can check
        return path.stat().st_size > 10_000
    with Image.open(path) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    return colours is None or len(colours) > 50


def check(
    site: Path, pages: Sequence[str] = PAGES, shots: Path | None = None, timeout: float = 60
) -> list[PageResult]:
    """Open each page of the built ``site`` in headless chromium; a result per page with its problems."""
    binary = chromium()
    if binary is None:
        raise FileNotFoundError("no chromium: apt-get install -y chromium (or set $CHROMIUM)")
    site = site.resolve()
    if not (site / "index.html").is_file():
        raise FileNotFoundError(f"{site} is not a built site (no index.html): run mkdocs build first")
    log: list[tuple[str, int]] = []
    handler = type("Handler", (_Handler,), {"log": log})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(handler, directory=str(site))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    results = []
    try:
        for page in pages:
            result = PageResult(page or "/")
            del log[:]
            dom = _run(binary, ["--dump-dom", base + page], timeout)
            parsed = _Page()
            parsed.feed(dom.stdout)
            if not parsed.nav_primary:
                result.problems.append("no primary navigation (nav.md-nav--primary) in the DOM")
            result.nav_links = len(re.findall(r'class="md-nav__link', dom.stdout))
            missing = [t for t in NAV_TITLES if t not in parsed.nav_text]
            if missing:
                result.problems.append(f"navigation lacks {missing}")
            fetched = dict(log)
            for image in parsed.images:
                src = image.get("src", "")
                path = (Path("/" + page) / src).resolve().as_posix() if not src.startswith("/") else src
                status = fetched.get(path)
                if status != 200:
                    result.problems.append(f"image {src} was {'not fetched' if status is None else status}")
                    continue
                file = site / path.lstrip("/")
                if _png_size(file) is None and file.suffix.lower() not in {".svg", ".jpg", ".jpeg", ".gif"}:
                    result.problems.append(f"image {src} is not a picture file")
                result.images += 1
            if shots is not None:
                shots.mkdir(parents=True, exist_ok=True)
                shot = shots / ((page.strip("/").replace("/", "-") or "home") + ".png")
                _run(binary, [f"--screenshot={shot}", base + page], timeout)
                if not shot.is_file() or not _not_blank(shot):
                    result.problems.append(f"screenshot {shot} is missing or blank")
                result.screenshot = shot
            results.append(result)
    finally:
        server.shutdown()
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", nargs="?", default="site", type=Path, help="the built site (default: site)")
    parser.add_argument("--page", action="append", help="a page path such as games/crafter/ (repeatable)")
    parser.add_argument("--shots", type=Path, default=Path("site-shots"), help="screenshot folder")
    args = parser.parse_args(argv)
    try:
        results = check(args.site, args.page or PAGES, args.shots)
    except FileNotFoundError as error:
        print(f"browser_check: {error}", file=sys.stderr)
        return 2
    failed = 0
    for r in results:
        verdict = "ok" if not r.problems else "FAILED: " + "; ".join(r.problems)
        print(
            f"{r.page:<16} {r.nav_links:3d} nav links, {r.images} pictures loaded, {r.screenshot}: {verdict}"
        )
        failed += bool(r.problems)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
