"""Fixtures of the console tests: a real ``ferrymq standalone`` and ``ferrymq console`` as
processes on free ports, the admin client, and headless Chromium (Debian's package, driven
by Playwright through executable_path: no browser download) with one browser per module."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from pathlib import Path

import pytest_asyncio
import yaml

from ferrymq.console.accounts import hash_password

from testkit.ports import free_port

from testkit.processes import FerryProcess, REPO, StandaloneProcess

from tests.support import missing_prerequisite

_ELSEWHERE = re.compile(r"^(?!https?://(127\.0\.0\.1|localhost)[:/])(?!data:|blob:)")
SCREENSHOTS = REPO / ".cache" / "console-screenshots"  # .cache/ is git-ignored
ENSURE_CHROMIUM = Path(__file__).with_name("ensure-chromium.sh")


def chromium_path() -> str:
    """Debian's chromium, which `make test` installs (tests/console/ensure-chromium.sh)."""
    path = os.environ.get("FERRYMQ_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not os.access(path, os.X_OK):
        missing_prerequisite(f"headless Chromium not found at {path}: run {ENSURE_CHROMIUM.relative_to(REPO)} "
                             "(make test does) to install Debian's chromium package")
    return path


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def ferry(tmp_path_factory, request):
    """A name server and a broker (one ``ferrymq standalone`` process), with the trace topic
    (traceTopicEnable) for the trace view."""
    work = tmp_path_factory.mktemp("console-ferry")
    process = StandaloneProcess(work / "store", ["traceTopicEnable=true"])
    await asyncio.to_thread(process.start)
    yield process
    await asyncio.to_thread(process.stop)
    if request.session.testsfailed:
        print(f"--- standalone log ({process.log_path}) ---\n{process.log()[-6000:]}")


async def _console_process(ferry, tmp_path_factory, request, mode: str, *more: str, port: int | None = None):
    port = port or free_port()
    log = tmp_path_factory.mktemp("console") / "console.log"
    process = FerryProcess(["console", "--cluster", f"local={ferry.namesrv_addr}", "--port", str(port), mode,
                            "--sample-seconds", "1", *more], "FerryMQ console is ready", log)
    await asyncio.to_thread(process.start)
    process.url = f"http://127.0.0.1:{port}"
    return process


async def _stop(process, request) -> None:
    await asyncio.to_thread(process.stop)
    if request.session.testsfailed:
        print(f"--- console log ({process.log_path}) ---\n{process.log()[-6000:]}")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def console(ferry, tmp_path_factory, request):
    """``ferrymq console`` for that cluster, writes allowed, sampling every second, trace ids
    linked to TRACE_URL."""
    process = await _console_process(ferry, tmp_path_factory, request, "--no-read-only", "--trace-url", TRACE_URL)
    yield process
    await _stop(process, request)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def read_only_console(ferry, tmp_path_factory, request):
    process = await _console_process(ferry, tmp_path_factory, request, "--read-only")
    yield process
    await _stop(process, request)


TRACE_URL = "https://traces.example.com/trace/{traceId}"  # never fetched: a link the page shows
# The accounts of signed_console: name -> (password, role, may read bodies)
ACCOUNTS = {"ada": ("ada-password", "admin", True), "vera": ("vera-password", "viewer", False)}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def signed_console(ferry, tmp_path_factory, request):
    """``ferrymq console --accounts`` with ACCOUNTS, writes allowed for the roles that may."""
    accounts = tmp_path_factory.mktemp("accounts") / "accounts.yaml"
    users = [{"name": n, "passwordHash": hash_password(pw), "role": role, "viewBodies": bodies}
             for n, (pw, role, bodies) in ACCOUNTS.items()]
    accounts.write_text(yaml.safe_dump({"users": users}))
    process = await _console_process(ferry, tmp_path_factory, request, "--no-read-only", "--accounts", str(accounts))
    yield process
    await _stop(process, request)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def admin(ferry):
    from ferrymq.client.admin import AdminClient

    client = AdminClient(namesrv_addr=ferry.namesrv_addr)
    yield client
    await client.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser():
    path = chromium_path()
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        missing_prerequisite("the playwright package is not installed (pip install -e '.[dev]')")
    async with async_playwright() as p:
        chromium = await p.chromium.launch(executable_path=path, args=["--no-sandbox", "--disable-gpu"])
        yield chromium
        await chromium.close()


class ConsolePage:
    """One browser tab on the console that records console errors and saves screenshots."""

    def __init__(self, page, base_url: str) -> None:
        self.page = page
        self.base_url = base_url
        self.errors: list[str] = []
        self.error_pages: list[str] = []  # the page's URL when each error happened
        page.on("console", lambda m: self._error(f"console {m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self._error(f"page error: {e}"))
        # Every asset comes from the console itself: no CDN, no other origin.
        page.on("request", lambda r: None if r.url.startswith((base_url, "data:", "blob:"))
                else self._error(f"request to another origin: {r.url}"))

    def _error(self, text: str) -> None:
        self.errors.append(text)
        self.error_pages.append(self.page.url)

    async def open(self, route: str) -> None:
        await self.page.goto(f"{self.base_url}/#/{route}")

    async def screenshot(self, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        await self.page.evaluate("window.scrollTo(0, 0)")  # the sticky bar then sits at the top
        await self.page.screenshot(path=str(path), full_page=True)
        return path

    def assert_no_errors(self) -> None:
        assert not self.errors, "the page logged errors:\n" + "\n".join(self.errors)


async def _page(browser, url: str):
    context = await browser.new_context(viewport={"width": 1360, "height": 900}, accept_downloads=True)
    # Nothing leaves this machine, whatever a page asks for (the test OIDC provider's pages
    # link a web font).
    await context.route(_ELSEWHERE, lambda route: route.abort())
    page = await context.new_page()
    page.set_default_timeout(15_000)
    return context, ConsolePage(page, url)


@pytest_asyncio.fixture(loop_scope="module")
async def console_page(browser, console):
    context, page = await _page(browser, console.url)
    yield page
    await context.close()


@pytest_asyncio.fixture(loop_scope="module")
async def signed_page(browser, signed_console):
    context, page = await _page(browser, signed_console.url)
    yield page
    await context.close()


@pytest_asyncio.fixture(loop_scope="module")
async def read_only_page(browser, read_only_console):
    context, page = await _page(browser, read_only_console.url)
    yield page
    await context.close()
