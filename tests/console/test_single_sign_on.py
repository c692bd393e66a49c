"""Console single sign-on in a real browser against a real OpenID Connect provider
(panva/oidc-provider from npm, tests/console/oidc) and a real ``ferrymq console`` and
``ferrymq standalone``: the Authorization Code flow with PKCE, the role and body permission from
the user's groups, a user in no mapped group refused, and a forged callback refused."""

from __future__ import annotations

import asyncio
import re
import shutil

import aiohttp
import pytest
import pytest_asyncio
import yaml

from tests.console.conftest import _console_process, _page, _stop
from tests.support import missing_prerequisite, require
from testkit.npm import ensure_npm_project
from testkit.ports import free_port
from testkit.processes import REPO, FerryProcess

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

SECRET = "console-client-secret"
LABEL = "Sign in with Test SSO"
SIGN_IN = re.compile(r"/signin(\?m=[a-z-]+)?(#.*)?$")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sso(ferry, tmp_path_factory, request):
    """The provider, and a console that signs in through it only (no local accounts)."""
    if not shutil.which("node"):
        missing_prerequisite("node is not on PATH (the OIDC provider of these tests runs on Node.js)")
    directory = await asyncio.to_thread(require, ensure_npm_project, "oidc-provider", REPO / "tests" / "console" / "oidc")
    work = tmp_path_factory.mktemp("sso")
    provider_port, console_port = free_port(), free_port()
    provider = FerryProcess([str(provider_port), f"http://127.0.0.1:{console_port}/auth/oidc/callback", SECRET],
                            '"event":"ready"', work / "provider.log", program=["node", "provider.mjs"], cwd=directory)
    await asyncio.to_thread(provider.start)
    accounts = work / "accounts.yaml"
    accounts.write_text(yaml.safe_dump({"users": [], "oidc": {
        "issuer": f"http://127.0.0.1:{provider_port}", "clientId": "ferrymq-console", "clientSecret": SECRET,
        "scopes": ["openid", "profile", "groups"], "label": LABEL,
        "roles": {"mq-admins": "admin", "mq-operators": "operator", "mq-viewers": "viewer"},
        "bodyGroups": ["mq-admins", "payments"]}}))
    console = await _console_process(ferry, tmp_path_factory, request, "--no-read-only", "--accounts", str(accounts),
                                     "--audit-log", str(work / "audit.jsonl"), port=console_port)
    console.provider_origin = f"http://127.0.0.1:{provider_port}"
    console.audit_path = work / "audit.jsonl"
    yield console
    await _stop(console, request)
    await asyncio.to_thread(provider.stop)
    if request.session.testsfailed:
        print(f"--- provider log ---\n{provider.log()[-4000:]}")


async def _sign_on(browser, sso, login: str):
    context, p = await _page(browser, sso.url)
    await p.page.goto(f"{sso.url}/")
    await p.page.wait_for_url(SIGN_IN)
    assert not await p.page.locator("input[name=password]").is_visible(), "no local accounts: no password form"
    await p.page.get_by_test_id("sso").click()
    await p.page.wait_for_url(re.compile(re.escape(sso.provider_origin)))
    await p.page.locator("input[name=login]").fill(login)
    await p.page.locator("input[name=password]").fill("any password: development interactions")
    await p.page.locator("button[type=submit]").click()
    await p.page.locator("button[type=submit]", has_text="Continue").click()  # the provider's consent
    return context, p


def _own_errors(p, sso) -> list[str]:
    """The console's own errors: not those of the provider's pages, nor requests to it."""
    return [e for e, at in zip(p.errors, p.error_pages)
            if not at.startswith(sso.provider_origin) and not e.startswith(f"request to another origin: {sso.provider_origin}")]


async def test_an_admin_signs_on_through_the_provider_and_gets_its_role_from_its_groups(browser, sso):
    context, p = await _sign_on(browser, sso, "ada")
    try:
        await p.page.wait_for_url(re.compile(re.escape(sso.url) + r"/(#.*)?$"))
        assert await p.page.get_by_test_id("user").inner_text() == "ada · admin"
        assert await p.page.locator("#mode").inner_text() == "read-write"
        await p.screenshot("sso-signed-in")
        assert not _own_errors(p, sso)
    finally:
        await context.close()
    entry = [e for e in _audit(sso) if e["action"] == "sign-in"][-1]
    assert entry["user"] == "ada" and entry["status"] == 200 and entry["via"] == "oidc" and entry["role"] == "admin"


@pytest.mark.parametrize("login,shown", [("vic", "vic · viewer"), ("olga", "olga · operator")])
async def test_viewers_and_operators_and_their_body_permission_from_groups(browser, sso, login, shown):
    context, p = await _sign_on(browser, sso, login)
    try:
        user = p.page.get_by_test_id("user")
        await user.wait_for()
        assert await user.inner_text() == shown
        config = await p.page.evaluate("fetch('/api/config').then(r => r.json())")
        assert config["user"]["viewBodies"] is (login == "olga"), "olga is in payments, a body group"
    finally:
        await context.close()


async def test_a_user_in_no_mapped_group_is_refused(browser, sso):
    context, p = await _sign_on(browser, sso, "nora")
    try:
        await p.page.wait_for_url(re.compile(r"/signin\?m=no-role$"))
        assert "no role" in await p.page.get_by_test_id("signin-message").inner_text()
        status = await p.page.evaluate("fetch('/api/config').then(r => r.status)")
        assert status == 401
    finally:
        await context.close()
    entry = [e for e in _audit(sso) if e["action"] == "sign-in"][-1]
    assert entry["user"] == "nora" and entry["status"] == 403


async def test_a_callback_not_started_by_this_browser_signs_no_one_in(sso):
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar) as http:
        async with http.get(f"{sso.url}/auth/oidc/start", allow_redirects=False) as r:
            assert r.status == 303 and r.headers["Location"].startswith(sso.provider_origin)
            state = re.search(r"[?&]state=([^&]+)", r.headers["Location"]).group(1)
            assert "code_challenge_method=S256" in r.headers["Location"]
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as other:  # not that browser
        async with other.get(f"{sso.url}/auth/oidc/callback", params={"state": state, "code": "stolen"},
                             allow_redirects=False) as r:
            assert r.status == 303 and r.headers["Location"] == "/signin?m=sso-failed"
        async with other.get(f"{sso.url}/api/config") as r:
            assert r.status == 401
    assert "another browser" in _audit(sso)[-1]["reason"]


def _audit(sso) -> list[dict]:
    import json
    return [json.loads(line) for line in sso.audit_path.read_text().splitlines()]
