"""Open the built site in headless chromium and check that its navigation, pictures and layout render.

Serves a built site (``mkdocs build``'s ``site/``) on a loopback port, and for a few pages runs chromium
headless three times: ``--dump-dom`` (the DOM after the page loaded, scripts run), ``--dump-dom`` of a page that
lays the page out in a frame :data:`WIDTH` pixels wide and measures it, and ``--screenshot``. A page passes
when its DOM has Material's navigation with the site's sections, every ``<img>`` of its article was fetched
from the server with status 200 and is a real image of the size it says, at :data:`WIDTH` pixels no table is
wider than its column (none scrolls sideways, so no column hides), no table cell breaks a word across lines,
no code block is wider than its box (a long line wraps: none scrolls or is clipped), and its screenshot is not
blank::

    python docs/browser_check.py site                  # the default pages; screenshots into site-shots/
    python docs/browser_check.py site --shots DIR --page games/crafter/

Chromium: ``apt-get install -y chromium`` (Debian's package; ``$CHROMIUM`` names another binary).
"""

from __future__ import annotations

import argparse
import functools
import html
import http.server
import json
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
#: The window width the layout is checked at: a laptop's.
WIDTH = 1280
#: The page that lays a page out in a frame WIDTH pixels wide and writes what it measured into its DOM as JSON:
#: tables wider than their column, table cells whose words break across lines, code blocks wider than their box.
LAYOUT = "/__layout__.html"
_LAYOUT_HTML = """<!doctype html><html><body style="margin:0">
<iframe id="frame" style="width:{width}px;height:900px;border:0"></iframe><pre id="layout">pending</pre>
<script>
const frame = document.getElementById("frame");
function measure() {
  const doc = frame.contentDocument, problems = new Set();
  const label = (el) => (el.textContent || "").trim().replace(/\\s+/g, " ").slice(0, 40);
  doc.querySelectorAll("article table").forEach((table, i) => {
    const column = (table.closest(".md-typeset__scrollwrap") || table.parentElement).clientWidth;
    if (table.scrollWidth > column + 1)
      problems.add(`table ${i + 1} ("${label(table.rows[0])}") is ${table.scrollWidth} px wide in a ${column} px column`);
    const walker = doc.createTreeWalker(table, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const word of node.data.matchAll(/[A-Za-z0-9]{2,}/g)) {
        const range = doc.createRange();
        range.setStart(node, word.index);
        range.setEnd(node, word.index + word[0].length);
        const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
        if (tops.size > 1) problems.add(`table ${i + 1} breaks the word "${word[0]}" across lines`);
      }
    }
  });
  doc.querySelectorAll("article pre > code").forEach((code, i) => {
    if (code.scrollWidth > code.clientWidth + 1)
      problems.add(`code block ${i + 1} ("${label(code)}") is ${code.scrollWidth} px wide in a ${code.clientWidth} px box`);
  });
  document.getElementById("layout").textContent = JSON.stringify({width: frame.clientWidth, problems: [...problems]});
}
frame.onload = () => setTimeout(measure, 1000);
frame.src = new URLSearchParams(location.search).get("page");
</script></body></html>
""".replace("{width}", str(WIDTH))
#: Section titles the navigation must show on every page.
NAV_TITLES = ("Games", "Training", "Results", "API reference")


def chromium() -> str | None:
    """The chromium binary, or None."""
    for name in (os.environ.get("CHROMIUM", ""), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the site, and the layout page at :data:`LAYOUT`; records every request's path and status."""

    log: list[tuple[str, int]]

    def do_GET(self) -> None:
        if self.path.split("?")[0] != LAYOUT:
            return super().do_GET()
        body = _LAYOUT_HTML.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

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
             "--no-first-run", "--virtual-time-budget=4000", f"--window-size={WIDTH + 120},1000"]  # fmt: skip
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


def layout(binary: str, base: str, page: str, timeout: float = 60) -> list[str]:
    """What the layout page measured for ``page`` at :data:`WIDTH` pixels: a line per problem."""
    dom = _run(binary, ["--dump-dom", f"{base}{LAYOUT.lstrip('/')}?page=/{page}"], timeout).stdout
    found = re.search(r'<pre id="layout">(.*?)</pre>', dom, re.DOTALL)
    try:
        measured = json.loads(html.unescape(found.group(1))) if found else None
    except json.JSONDecodeError:
        measured = None
    if not isinstance(measured, dict):
        return [f"the layout of {page or '/'} could not be measured"]
    return [f"at {WIDTH} px: {problem}" for problem in measured["problems"]]


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
            result.problems += layout(binary, base, page, timeout)
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
