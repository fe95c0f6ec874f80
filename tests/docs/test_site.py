"""The built docs site in a real browser: headless Chromium opens the front page (the README), follows
the navigation to the two generated reference pages, and finds a page with the search box."""

from __future__ import annotations

import functools
import re
import shutil
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.docs.build import ROOT, mkdocs_build

pytestmark = pytest.mark.slow
# This machine's network is closed, and the test must not wait on it: Chromium's own traffic (updates,
# sync, QUIC probes) stays off. As root Chromium runs only without its sandbox.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# A page, or the search worker's first answer, comes in well under a second on a quiet machine; the
# suite runs three workers on two cores, so the limit is generous.
WAIT_MS = 60_000


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass  # a line per request on stderr would bury a failure's own output


@pytest.fixture(scope="module")
def site_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    site = tmp_path_factory.mktemp("site")
    built = mkdocs_build(ROOT / "mkdocs.yml", site)
    assert built.returncode == 0, built.stderr[-3000:]

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()
    thread.join()
    server.server_close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("the docs site's test drives Chromium headless: `make system-packages` installs it (apt)", pytrace=False)
    # Playwright's own browser downloads are out of reach here; Debian's Chromium runs it. Each launch
    # gets a new temporary profile (user-data-dir) from Playwright.
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser, site_url: str) -> Iterator[Page]:
    context = browser.new_context()  # no cookies or storage from another test
    opened = context.new_page()
    opened.set_default_timeout(WAIT_MS)
    opened.goto(site_url)
    yield opened
    context.close()


def readme_first_paragraph() -> str:
    """The README's first paragraph after its title, as a browser shows it (code spans and links as text)."""
    paragraph = ROOT.joinpath("README.md").read_text().split("\n\n")[1]
    shown = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", paragraph).replace("`", "")
    return " ".join(shown.split())


def follow_navigation(page: Page, title: str) -> None:
    page.locator(".md-nav--primary").get_by_role("link", name=title, exact=True).click()


def test_the_front_page_shows_the_readme(page):
    expect(page.locator("article h1").first).to_contain_text("trainstack")
    expect(page.locator("article p").first).to_have_text(readme_first_paragraph())


def test_the_navigation_leads_to_the_spec_reference(page):
    follow_navigation(page, "Spec reference")

    expect(page).to_have_url(re.compile(r"/reference/job-spec\.html$"))
    expect(page.locator("article h1")).to_contain_text("Job spec reference")
    expect(page.locator("article").get_by_role("cell", name="instance_type", exact=True)).to_be_visible()


def test_the_navigation_leads_to_the_cli_reference(page):
    follow_navigation(page, "CLI reference")

    expect(page).to_have_url(re.compile(r"/reference/cli\.html$"))
    expect(page.locator("article h1")).to_contain_text("CLI reference")
    expect(page.locator("article").get_by_role("heading", name="trainstack submit")).to_be_visible()


def test_the_search_box_finds_a_page(page):
    # Material's search runs in a web worker over search/search_index.json; a result is a link to the page.
    # It searches on a key released, on focus, and once when the worker is ready: typed keys, as a user
    # types, not `fill`, which sets the value with no keyup and so found nothing whenever the worker was
    # ready before the fill (a CI run timed out that way).
    page.locator("input[data-md-component=search-query]").press_sequentially("ModelShape")
    page.locator(".md-search-result__link").first.click()

    expect(page).to_have_url(re.compile(r"/reference/job-spec\.html"))
    expect(page.locator("article h1")).to_contain_text("Job spec reference")
