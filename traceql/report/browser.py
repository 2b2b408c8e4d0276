"""Open a report in a real headless Chromium with the network cut off, and say whether every chart rendered.

Used by the tests and by ``python -m traceql.report.browser REPORT.html [--screenshot PNG]``. Needs the
``playwright`` package (its bundled driver only; no browser download) and a Chromium on the machine
(Debian: ``apt-get install chromium``; or set ``TRACEQL_CHROMIUM``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--host-resolver-rules=MAP * ~NOTFOUND"]


@dataclass
class PageCheck:
    charts: int
    rendered: int
    failed: int
    svgs: int
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    network_requests: list[str] = field(default_factory=list)  # anything not file:, data: or blob: (all refused)
    dialogs: list[str] = field(default_factory=list)  # alert()/confirm(): a sign of script injected through a name
    text: str = ""

    @property
    def ok(self) -> bool:
        return (self.rendered == self.charts and not self.failed and self.svgs >= self.charts
                and not self.console_errors and not self.page_errors and not self.network_requests
                and not self.dialogs)


def find_chromium() -> str | None:
    for candidate in (os.environ.get("TRACEQL_CHROMIUM"), shutil.which("chromium"), shutil.which("chromium-browser"),
                      shutil.which("google-chrome"), "/usr/bin/chromium"):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def check_page(path: str | Path, screenshot: str | Path | None = None, timeout_s: float = 60) -> PageCheck:
    """Load ``path`` offline, wait until every chart settled, and report what happened."""
    from playwright.sync_api import sync_playwright

    exe = find_chromium()
    if exe is None:
        raise FileNotFoundError("no Chromium found: install Debian's chromium package or set TRACEQL_CHROMIUM")
    url = Path(path).resolve().as_uri()
    console, errors, requests, dialogs = [], [], [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000}, offline=True)
            page = context.new_page()

            def route(r):
                if r.request.url.split(":", 1)[0] in ("file", "data", "blob"):
                    r.continue_()
                else:
                    requests.append(r.request.url)
                    r.abort()

            page.route("**/*", route)
            page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(url, wait_until="load", timeout=timeout_s * 1000)
            page.evaluate("() => window.traceqlRenderAll && window.traceqlRenderAll()")  # charts drawn when near
            page.wait_for_function("document.body.dataset.chartsDone === 'true'", timeout=timeout_s * 1000)
            info = page.evaluate("""() => ({
                charts: document.querySelectorAll('div.chart').length,
                rendered: Number(document.body.dataset.chartsRendered || 0),
                failed: Number(document.body.dataset.chartsFailed || 0),
                svgs: document.querySelectorAll('div.chart svg.marks').length,
                text: document.body.innerText})""")
            if screenshot is not None:
                page.screenshot(path=str(screenshot), full_page=True)
        finally:
            browser.close()
    return PageCheck(info["charts"], info["rendered"], info["failed"], info["svgs"], console, errors, requests,
                     dialogs, info["text"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", type=Path)
    ap.add_argument("--screenshot", type=Path)
    args = ap.parse_args(argv)
    check = check_page(args.report, args.screenshot)
    print(f"charts {check.charts}, rendered {check.rendered}, failed {check.failed}, svg {check.svgs}; "
          f"console errors {len(check.console_errors)}, page errors {len(check.page_errors)}, "
          f"network requests {len(check.network_requests)}, dialogs {len(check.dialogs)}")
    for line in check.console_errors + check.page_errors + check.network_requests + check.dialogs:
        print("  " + line[:300])
    return 0 if check.ok else 1


if __name__ == "__main__":
    sys.exit(main())
