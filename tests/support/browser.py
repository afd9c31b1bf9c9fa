"""A headless Chromium driven by Playwright, for the console's tests and its screenshot.

The browser is Debian's `chromium` package (the system browser: `playwright install`
downloads a build of its own, which this project does not use), launched headless;
Playwright gives each launch a fresh, temporary profile, and each `new_context` its own
storage. `watch` records what a page's console logs at level error and every uncaught
exception, so a test can require that a view logged none.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage, Page

ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def missing() -> str | None:
    """Why the browser tests cannot run here (None: they can)."""
    if shutil.which("chromium") is None:
        return (
            "Debian's chromium is not installed (scripts/test installs it when run as root: "
            "apt-get install chromium)"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[dev]')"
    return None


@dataclass
class Watched:
    """A page and the errors it logged."""

    page: Page
    errors: list[str] = field(default_factory=list)

    def take_errors(self) -> list[str]:
        errors, self.errors = self.errors, []
        return errors


@contextmanager
def chromium() -> Iterator[Browser]:
    """A headless Chromium, closed afterwards."""
    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium")
    assert executable is not None, missing()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=list(ARGS), headless=True)
        try:
            yield browser
        finally:
            browser.close()


def watch(page: Page) -> Watched:
    """Record `page`'s console errors and uncaught exceptions."""
    watched = Watched(page)

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            watched.errors.append(f"console: {message.text} ({message.location})")

    page.on("console", on_console)
    page.on("pageerror", lambda exc: watched.errors.append(f"uncaught: {exc}"))
    return watched
