"""Console sign-in and roles against a real name server and broker, over HTTP as a browser or a
script would reach them: without a session nothing but the sign-in page is served, each role
does what it may and no more, bodies stay hidden from an account without body viewing, every
write is in the audit log, and a changed accounts file applies to open sessions."""

from __future__ import annotations

import json
import re

import aiohttp
import pytest
import yaml

from ferrymq.client.admin import AdminClient
from ferrymq.console.access import COOKIE, CSRF_HEADER
from ferrymq.console.accounts import hash_password
from ferrymq.console.server import ConsoleServer
from ferrymq.console.settings import ClusterSpec, ConsoleSettings
from tests.consumer_support import produce
from testkit.wait import wait_until

pytestmark = pytest.mark.integration

PASSWORDS = {"vera": "viewer-pass", "bodo": "viewer-with-bodies", "otto": "operator-pass", "ada": "admin-pass"}
ROLES = {"vera": ("viewer", False), "bodo": ("viewer", True), "otto": ("operator", True), "ada": ("admin", True)}


def write_accounts(path, names=tuple(ROLES), roles=ROLES) -> None:
    users = [{"name": n, "passwordHash": hash_password(PASSWORDS[n]), "role": roles[n][0], "viewBodies": roles[n][1]}
             for n in names]
    path.write_text(yaml.safe_dump({"users": users}))


@pytest.fixture
async def signed_console(cluster, tmp_path):
    accounts, audit = tmp_path / "accounts.yaml", tmp_path / "audit.jsonl"
    write_accounts(accounts)
    server = ConsoleServer(ConsoleSettings([ClusterSpec("local", cluster.namesrv_addr)], host="127.0.0.1", port=0,
                                           read_only=False, sample_seconds=60, accounts_file=str(accounts),
                                           audit_log=str(audit)))
    await server.start()
    server.accounts_path, server.audit_path = accounts, audit
    yield server
    await server.stop()


class Browser:
    """One visitor: a cookie jar, and the CSRF token the console's page would read."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))  # cookies for 127.0.0.1
        self.csrf: str | None = None

    async def sign_in(self, name: str, password: str | None = None) -> str:
        async with self.session.post(self.base + "/auth/signin", allow_redirects=False,
                                     data={"name": name, "password": password or PASSWORDS[name]}) as r:
            assert r.status == 303, r.status
            where = r.headers["Location"]
        if where == "/":
            self.csrf = (await self.call("GET", "/api/config"))[1]["csrfToken"]
        return where

    async def call(self, method: str, path: str, body=None, *, csrf: bool = True):
        headers = {CSRF_HEADER: self.csrf} if csrf and self.csrf else {}
        async with self.session.request(method, self.base + path, json=body, headers=headers,
                                        allow_redirects=False) as r:
            text = await r.text()
            data = json.loads(text) if r.content_type == "application/json" and text else text
            return r.status, data, r.headers

    async def close(self) -> None:
        await self.session.close()


@pytest.fixture
async def visitors(signed_console):
    opened: list[Browser] = []

    def new() -> Browser:
        opened.append(Browser(signed_console.url))
        return opened[-1]

    yield new
    for b in opened:
        await b.close()


def api_routes(server: ConsoleServer) -> list[tuple[str, str]]:
    """Every method and path of the console's API, placeholders filled in."""
    routes = []
    for route in server.build_app().router.routes():
        path = route.resource.canonical if route.resource else ""
        if path.startswith("/api/"):
            path = re.sub(r"\{tail:[^}]*\}", "anything/else", path)
            routes.append((route.method if route.method != "*" else "PUT", re.sub(r"\{[^}]+\}", "x", path)))
    return routes


def audit_lines(server) -> list[dict]:
    return [json.loads(line) for line in server.audit_path.read_text().splitlines()]


async def test_without_a_session_only_the_sign_in_page_is_served(signed_console, visitors):
    anonymous = visitors()
    routes = api_routes(signed_console)
    assert len(routes) >= 15 and ("DELETE", "/api/clusters/x/topics/x") in routes
    for method, path in routes:
        status, data, _ = await anonymous.call(method, path, {})
        assert status == 401 and (method == "HEAD" or "sign in" in data["error"]), (method, path, status, data)
    for path in ("/", "/static/app.js", "/static/api.js", "/static/pages/messages.js", "/static/style.css",
                 "/static/index.html", "/elsewhere", "/auth/signout"):
        method = "POST" if path == "/auth/signout" else "GET"
        status, _, headers = await anonymous.call(method, path)
        assert status == 303 and headers["Location"] == "/signin", (path, status)
    status, page, _ = await anonymous.call("GET", "/signin")
    assert status == 200 and 'action="/auth/signin"' in page and 'name="password"' in page
    for path in ("/static/signin.css", "/static/logo.svg", "/healthz"):
        assert (await anonymous.call("GET", path))[0] == 200, path
    # a guessed or forged cookie is no session
    anonymous.session.cookie_jar.update_cookies({COOKIE: "forged"})
    assert (await anonymous.call("GET", "/api/config"))[0] == 401


async def test_a_wrong_password_is_refused_and_repeated_failures_lock_the_name(signed_console, visitors):
    guesser = visitors()
    assert await guesser.sign_in("ada", "wrong") == "/signin?m=failed"
    assert await guesser.sign_in("nobody", "wrong") == "/signin?m=failed"
    assert (await guesser.call("GET", "/api/config"))[0] == 401
    status, page, _ = await guesser.call("GET", "/signin?m=failed")
    assert "Wrong name or password." in page
    for _ in range(4):
        await guesser.sign_in("ada", "wrong")
    # five failures in a row: even the right password waits out the window
    assert await visitors().sign_in("ada") == "/signin?m=locked"
    failures = [e for e in audit_lines(signed_console) if e["action"] == "sign-in" and e["status"] != 200]
    assert len(failures) == 7 and {e["user"] for e in failures} == {"ada", "nobody"}
    assert not any("wrong" in json.dumps(e) for e in failures), "a tried password must not reach the audit log"


async def test_each_role_may_do_what_it_may_and_every_write_is_audited(signed_console, visitors, cluster):
    async with AdminClient(namesrv_addr=cluster.namesrv_addr) as admin:
        await admin.create_topic("Orders", read_queues=1, write_queues=1)
        await wait_until(lambda: _routed(admin, "Orders"), 10, "a route for Orders")
        await produce(cluster.namesrv_addr, "Orders", 2, prefix="order")
        vera, bodo, otto, ada = visitors(), visitors(), visitors(), visitors()
        for who, name in ((vera, "vera"), (bodo, "bodo"), (otto, "otto"), (ada, "ada")):
            assert await who.sign_in(name) == "/"
        config = (await vera.call("GET", "/api/config"))[1]
        assert config["user"] == {"name": "vera", "role": "viewer", "viewBodies": False} and config["signIn"] is True

        send = ("POST", "/api/clusters/local/topics/Orders/messages", {"body": "secret payload", "keys": "k1"})
        create = ("POST", "/api/clusters/local/topics", {"topic": "Invoices", "readQueues": 1, "writeQueues": 1})
        delete = ("DELETE", "/api/clusters/local/topics/Invoices", None)
        reset = ("POST", "/api/clusters/local/groups/g1/consume", {"enable": False})
        for method, path, body in (send, create, delete, reset):
            status, data, _ = await vera.call(method, path, body)
            assert status == 403 and "vera is a viewer" in data["error"], (path, data)
        for method, path, body in (create, delete):
            status, data, _ = await otto.call(method, path, body)
            assert status == 403 and "needs an admin" in data["error"]
        assert "Invoices" not in await admin.topic_list()
        assert (await otto.call(*send))[0] == 200
        assert (await otto.call(*reset))[0] == 200
        status, data, _ = await ada.call(*create, csrf=False)
        assert status == 403 and CSRF_HEADER in data["error"]
        assert (await ada.call(*create))[0] == 200
        assert "Invoices" in await admin.topic_list()

        # bodies: hidden from vera, shown to bodo; an export holds bodies, so vera gets none
        found = "/api/clusters/local/messages/by-key?topic=Orders&key=k1"
        hidden = (await vera.call("GET", found))[1]["messages"][0]
        shown = (await bodo.call("GET", found))[1]["messages"][0]
        assert hidden["bodyHidden"] is True and hidden["body"] is None and hidden["bodyBase64"] is None
        assert shown["body"] == "secret payload" and hidden["bodySize"] == shown["bodySize"] == 14
        export = "/api/clusters/local/messages/export?mode=key&topic=Orders&key=k1"
        status, data, _ = await vera.call("GET", export)
        assert status == 403 and "may not read message bodies" in data["error"]
        status, data, _ = await bodo.call("GET", export)
        assert status == 200 and "secret payload" in data

    writes = [e for e in audit_lines(signed_console) if e["action"].startswith(("POST /api", "DELETE /api"))]
    assert [(e["user"], e["action"], e["status"]) for e in writes] == [
        ("vera", "POST /api/clusters/local/topics/Orders/messages", 403),
        ("vera", "POST /api/clusters/local/topics", 403),
        ("vera", "DELETE /api/clusters/local/topics/Invoices", 403),
        ("vera", "POST /api/clusters/local/groups/g1/consume", 403),
        ("otto", "POST /api/clusters/local/topics", 403),
        ("otto", "DELETE /api/clusters/local/topics/Invoices", 403),
        ("otto", "POST /api/clusters/local/topics/Orders/messages", 200),
        ("otto", "POST /api/clusters/local/groups/g1/consume", 200),
        ("ada", "POST /api/clusters/local/topics", 403),
        ("ada", "POST /api/clusters/local/topics", 200),
    ]
    assert writes[-1]["request"]["topic"] == "Invoices" and writes[-1]["time"].endswith("Z")
    assert writes[6]["request"]["body"] == "…", "a message body does not go into the audit log"
    assert "secret payload" not in signed_console.audit_path.read_text()


async def test_a_changed_accounts_file_applies_to_open_sessions_and_sign_out_ends_one(signed_console, visitors):
    vera, otto, ada = visitors(), visitors(), visitors()
    for who, name in ((vera, "vera"), (otto, "otto"), (ada, "ada")):
        assert await who.sign_in(name) == "/"
    roles = {**ROLES, "otto": ("admin", True)}
    write_accounts(signed_console.accounts_path, names=("otto", "ada"), roles=roles)  # vera removed, otto promoted
    assert (await vera.call("GET", "/api/config"))[0] == 401
    assert (await otto.call("GET", "/api/config"))[1]["user"]["role"] == "admin"
    # a broken file keeps the accounts read before rather than locking everyone out
    signed_console.accounts_path.write_text("users: [")
    assert (await ada.call("GET", "/api/config"))[0] == 200
    status, _, headers = await ada.call("POST", "/auth/signout")
    assert status == 303 and headers["Location"] == "/signin?m=signedout"
    assert (await ada.call("GET", "/api/config"))[0] == 401
    assert [e["action"] for e in audit_lines(signed_console)][-1] == "sign-out"


async def _routed(admin, topic: str) -> bool:
    try:
        return bool((await admin.topic_route(topic)).queue_datas)
    except Exception:  # noqa: BLE001 - not registered with the name server yet
        return False
