"""The README's screenshots of the console, taken against `sparkiq demo`'s data.

    .venv/bin/python -m tests.support.screenshot [--out docs]

Starts `sparkiq demo` (Apache Kafka, invoices, the Spark pipeline, three nodes; 2-3 minutes
to be ready on two cores), waits for the URL it prints for the console, opens three views
in headless Chromium with the code the browser tests use (`tests.support.browser`), saves
them as PNG files, and stops the demo (SIGINT, by its PID).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support import browser

VIEWS = {
    "console-cluster.png": "/ui/",
    "console-sales.png": "/ui/tables/store-sales/keys/{store}",
    "console-pipeline.png": "/ui/pipeline",
}
_CONSOLE = re.compile(r"console \(.*\): (http://\S+)/ui/")
_SALES = re.compile(r"sales per minute: \S+/keys/(\S+)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs"))
    parser.add_argument("--settle-s", type=float, default=60.0, help="charts fill meanwhile")
    args = parser.parse_args()
    reason = browser.missing()
    if reason is not None:
        sys.exit(f"cannot take screenshots: {reason}")
    demo = subprocess.Popen(
        [sys.executable, "-m", "sparkiq", "demo", "--duration", "900"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        node, store = _wait_ready(demo)
        time.sleep(args.settle_s)  # a minute of micro-batches for the pipeline's charts
        args.out.mkdir(parents=True, exist_ok=True)
        with browser.chromium() as b:
            context = b.new_context(viewport={"width": 1280, "height": 860})
            page = browser.watch(context.new_page())
            for name, path in VIEWS.items():
                page.page.goto(node + path.format(store=store))
                page.page.locator("#status:has-text('updated')").wait_for(timeout=60_000)
                page.page.wait_for_timeout(2_500)  # one more refresh, charts drawn
                page.page.screenshot(path=str(args.out / name))
                errors = page.take_errors()
                if errors:
                    sys.exit(f"{path} logged errors: {errors}")
                print(f"{args.out / name}: {node}{path.format(store=store)}")
    finally:
        demo.send_signal(signal.SIGINT)
        try:
            demo.wait(120)
        except subprocess.TimeoutExpired:
            demo.kill()
            demo.wait()


def _wait_ready(demo: subprocess.Popen[str]) -> tuple[str, str]:
    """The console's node URL and the store of the example key, from the demo's output."""
    assert demo.stdout is not None
    node = None
    for line in demo.stdout:
        sys.stdout.write(line)
        found = _CONSOLE.search(line)
        if found:
            node = found.group(1)
        sales = _SALES.search(line)
        if node and sales:
            return node, sales.group(1)
    sys.exit(f"the demo exited ({demo.wait()}) before it printed the console's URL")


if __name__ == "__main__":
    main()
