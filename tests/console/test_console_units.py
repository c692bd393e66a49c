"""The console's pure parts: cluster options, the read-only default, alert derivation,
topic kinds, search cursors and export lines."""

from __future__ import annotations

import argparse
import csv
import io
import json
import subprocess
import sys

import pytest
import yaml

from ferrymq.console.accounts import Account, AccountsError, hash_password, parse_accounts, parse_sign_in, verify_password
from ferrymq.console.sessions import Sessions

from ferrymq.cli.console_command import settings_from
from ferrymq.console import message_export
from ferrymq.console.alerts import BrokerState, derive_alerts
from ferrymq.console.http_errors import BadRequest, point_in_time
from ferrymq.console.message_search import Cursor
from ferrymq.console.settings import ClusterSpec, ConsoleSettings, SettingsError, parse_cluster
from ferrymq.console.topic_kinds import group_is_system, topic_kind


def test_cluster_option_parses_names_and_name_server_lists():
    assert parse_cluster("prod=ns1:9876;ns2.example:9876") == ClusterSpec("prod", "ns1:9876;ns2.example:9876")
    assert parse_cluster(" dev = 127.0.0.1:9876 ; ") == ClusterSpec("dev", "127.0.0.1:9876")


@pytest.mark.parametrize("text,needle", [("prod", "name=host:port"), ("=ns:9876", "name=host:port"),
                                         ("p rod=ns:9876", "cluster name"), ("prod=ns", "host:port"),
                                         ("prod=ns:99999", "host:port")])
def test_bad_cluster_options_say_what_is_wrong(text, needle):
    with pytest.raises(SettingsError, match=needle):
        parse_cluster(text)


def test_settings_need_unique_cluster_names():
    with pytest.raises(SettingsError, match="unique: a"):
        ConsoleSettings([ClusterSpec("a", "x:1"), ClusterSpec("a", "y:1")])
    with pytest.raises(SettingsError, match="at least one"):
        ConsoleSettings([])


def _args(**kw):
    base = dict(clusters=[ClusterSpec("c", "127.0.0.1:9876")], host="127.0.0.1", port=0, read_only=None,
                sample_seconds=10.0, history_minutes=15.0, max_export=10, access_key=None, tls=False,
                tls_ca_file=None, tls_insecure=False, accounts=None, audit_log=None, session_idle_minutes=60.0,
                session_hours=12.0, secure_cookies=False, trace_url=None, https_cert=None,
                https_key=None, https_reload_seconds=30.0)
    return argparse.Namespace(**{**base, **kw})


def test_read_only_by_default_unless_only_on_loopback(monkeypatch):
    monkeypatch.delenv("FERRYMQ_ACCESS_KEY", raising=False)
    assert settings_from(_args(host="127.0.0.1")).read_only is False
    assert settings_from(_args(host="0.0.0.0")).read_only is True
    assert settings_from(_args(host="0.0.0.0", read_only=False)).read_only is False
    assert settings_from(_args(host="::1", read_only=True)).read_only is True


def test_credentials_and_tls_follow_the_clis_rules(monkeypatch):
    monkeypatch.setenv("FERRYMQ_SECRET_KEY", "s3cret")
    settings = settings_from(_args(access_key="console", tls=True))
    config = settings.client_config("c")
    assert config.credentials.access_key == "console" and config.tls is not None
    assert config.namesrv_addr == "127.0.0.1:9876"
    assert settings.client_config("c").instance_name != config.instance_name, "one client id per client"
    monkeypatch.delenv("FERRYMQ_SECRET_KEY")
    with pytest.raises(Exception, match="FERRYMQ_SECRET_KEY"):
        settings_from(_args(access_key="console"))


def test_alerts_derived_from_a_cluster_read():
    healthy = BrokerState("C", "b", 0, "10.0.0.1:10911", disk_ratio=0.5, disk_warning_ratio=0.9)
    assert derive_alerts(namesrv_error=None, brokers=[healthy], seen_before={"b"}, masters_by_name={"b": True},
                         disabled_groups=[]) == []
    full = BrokerState("C", "b", 0, "10.0.0.1:10911", disk_ratio=0.93, disk_warning_ratio=0.9)
    silent = BrokerState("C", "c", 1, "10.0.0.2:10911", error="timeout")
    alerts = derive_alerts(namesrv_error=None, brokers=[full, silent], seen_before={"b", "c", "gone"},
                           masters_by_name={"b": True, "c": False}, disabled_groups=["slow"])
    kinds = {(a.kind, a.subject) for a in alerts}
    assert kinds == {("broker-unregistered", "gone"), ("no-master", "c"), ("disk-above-warning", "b (10.0.0.1:10911)"),
                     ("broker-unreachable", "c (10.0.0.2:10911)"), ("group-disabled", "slow")}
    assert "93%" in next(a.message for a in alerts if a.kind == "disk-above-warning")
    [down] = derive_alerts(namesrv_error="connection refused", brokers=[], seen_before={"b"}, masters_by_name={},
                           disabled_groups=[])
    assert down.kind == "namesrv-unreachable" and down.severity == "critical"


@pytest.mark.parametrize("topic,kind", [("Orders", "normal"), ("%RETRY%g", "retry"), ("%DLQ%g", "dlq"),
                                        ("TBW102", "system"), ("RMQ_SYS_TRANS_HALF_TOPIC", "system"),
                                        ("DefaultCluster_REPLY_TOPIC", "system"), ("DefaultCluster", "system")])
def test_topic_kinds(topic, kind):
    assert topic_kind(topic, {"DefaultCluster", "broker-a"}) == kind


def test_system_groups():
    assert group_is_system("TOOLS_CONSUMER") and group_is_system("CID_RMQ_SYS_TRANS") and not group_is_system("billing")


def test_cursors_round_trip_and_refuse_forgeries():
    assert Cursor.decode(Cursor(3, 17).encode()) == Cursor(3, 17)
    assert Cursor.decode(None) == Cursor()
    for bad in ("%%%", "eyJ4IjogMX0", Cursor(-1, 0).encode()):
        with pytest.raises(BadRequest):
            Cursor.decode(bad)


def test_points_in_time():
    assert point_in_time("1700000000000", "t") == 1700000000000
    assert point_in_time("2024-06-01T12:00:00Z", "t") == point_in_time("2024-06-01T12:00:00", "t") == 1717243200000
    with pytest.raises(BadRequest, match="ISO"):
        point_in_time("yesterday", "t")


def _message(**kw):
    return {"topic": "T", "queueId": 1, "queueOffset": 2, "msgId": "M", "offsetMsgId": "O", "tags": None,
            "keys": ["a", "b"], "storeTimestamp": 1717243200000, "bornTimestamp": 1717243200000, "reconsumeTimes": 0,
            "bodySize": 5, "bodyEncoding": "utf-8", "body": 'a,"b"\nc', "bodyBase64": "", "properties": {"x": "1"}, **kw}


def test_export_lines_round_trip_through_csv_and_json():
    text = message_export.header("csv") + message_export.line("csv", _message())
    [row] = list(csv.DictReader(io.StringIO(text)))
    assert row["body"] == 'a,"b"\nc' and row["keys"] == "a b" and json.loads(row["properties"]) == {"x": "1"}
    assert row["storeTime"] == "2024-06-01T12:00:00.000+00:00"
    binary = list(csv.DictReader(io.StringIO(message_export.header("csv") + message_export.line(
        "csv", _message(bodyEncoding="binary", body=None, bodyBase64="AJ8=")))))[0]
    assert binary["bodyEncoding"] == "base64" and binary["body"] == "AJ8="
    assert json.loads(message_export.line("jsonl", _message()))["body"] == 'a,"b"\nc'


def test_rates_come_from_counter_differences_and_lose_no_message():
    from collections import deque

    from ferrymq.console.overview import ClusterHistory, OverviewSampler

    history = ClusterHistory(deque())
    rates = OverviewSampler._rates
    assert rates(history, "b", (100.0, 0, 0), True) == (None, None)  # the first sample: nothing to compare
    assert rates(history, "b", (100.01, 10, 0), True) == (None, None)  # too close to measure...
    assert rates(history, "b", (102.0, 10, 4), True) == (5.0, 2.0)  # ...so the next one counts those 10
    assert rates(history, "b", (103.0, 20, 4), False) == (10.0, 0.0)  # a page's look records nothing
    assert rates(history, "b", (104.0, 30, 6), True) == (10.0, 1.0)
    assert rates(history, "b", (105.0, 3, 0), True) == (None, None)  # the broker restarted: counters reset
    assert rates(history, "b", (106.0, 5, 1), True) == (2.0, 1.0)


# ---------------------------------------------------------------------- accounts and sessions

def test_a_password_hash_verifies_only_its_password_and_two_hashes_of_one_password_differ():
    first, second = hash_password("tea for two"), hash_password("tea for two")
    assert first != second and first.startswith("scrypt$16384$8$1$")
    account = Account("ada", first, "admin")
    assert verify_password(account, "tea for two") and not verify_password(account, "tea for three")


@pytest.mark.parametrize("users,needle", [
    ("[]", "at least one account"),
    ("[{name: ada, role: admin}]", "passwordHash is required"),
    ("[{name: ada, role: root, passwordHash: HASH}]", "role must be one of viewer, operator, admin, got 'root'"),
    ("[{name: ada, role: admin, passwordHash: plain}]", "passwordHash must be scrypt$"),
    ("[{name: ada, role: admin, passwordHash: 'scrypt$1048577$8$1$c2FsdA==$aGFzaGhhc2hoYXNoaGFzaA=='}]", "out of range"),
    ("[{name: 'a b', role: admin, passwordHash: HASH}]", "name must be"),
    ("[{name: ada, role: admin, passwordHash: HASH}, {name: ada, role: viewer, passwordHash: HASH}]", "ada is given twice"),
    ("[{name: ada, role: admin, passwordHash: HASH, password: x}]", "unknown keys password"),
    ("[{name: ada, role: admin, passwordHash: HASH, viewBodies: 'yes'}]", "viewBodies must be true or false"),
])
def test_an_accounts_file_that_cannot_be_used_says_why(users, needle):
    with pytest.raises(AccountsError) as e:
        parse_accounts(f"users: {users}".replace("HASH", hash_password("x")), "accounts.yaml")
    assert needle in str(e.value) and str(e.value).startswith("accounts.yaml")


def test_roles_are_ordered_and_bodies_are_off_unless_granted():
    accounts = parse_accounts(f"users: [{{name: v, role: viewer, passwordHash: '{hash_password('x')}'}}]")
    assert accounts["v"].view_bodies is False
    assert Account("o", "-", "operator").may("viewer") and Account("o", "-", "operator").may("operator")
    assert not Account("o", "-", "operator").may("admin") and Account("a", "-", "admin").may("operator")


def test_a_session_ends_when_idle_at_its_lifetime_or_when_signed_out():
    now = [1000.0]
    sessions = Sessions(idle_seconds=60, lifetime_seconds=300, max_sessions=3, clock=lambda: now[0])
    a = sessions.start("ada")
    assert sessions.find(a.id) is a and sessions.find("guess") is None and sessions.find(None) is None
    now[0] += 59
    assert sessions.find(a.id) is a  # each request restarts the idle time
    now[0] += 59
    assert sessions.find(a.id) is a
    now[0] += 61
    assert sessions.find(a.id) is None
    b = sessions.start("bob")
    for _ in range(7):
        now[0] += 50
        sessions.find(b.id)
    assert sessions.find(b.id) is None, "an active session still ends at its lifetime"
    c = sessions.start("cy")
    sessions.end(c.id)
    assert sessions.find(c.id) is None
    many = [sessions.start(f"u{i}") for i in range(5)]
    assert len(sessions) == 3 and sessions.find(many[0].id) is None and sessions.find(many[-1].id) is not None
    assert a.csrf_token != b.csrf_token and len(a.id) >= 40


def test_hash_password_prints_an_account_entry_the_console_accepts():
    run = subprocess.run([sys.executable, "-m", "ferrymq.cli.main", "console", "hash-password", "--name", "otto",
                          "--role", "operator"], input="pass word\n", capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    account = parse_accounts("users:\n" + run.stdout)["otto"]
    assert account.role == "operator" and account.view_bodies is False
    assert verify_password(account, "pass word") and not verify_password(account, "pass word\n")
    empty = subprocess.run([sys.executable, "-m", "ferrymq.cli.main", "console", "hash-password"], input="\n",
                           capture_output=True, text=True, timeout=60)
    assert empty.returncode != 0 and "empty password" in empty.stderr


def _oidc(**over):
    return {"issuer": "https://sso.example.com/realms/ops", "clientId": "console", "roles": {"ops": "operator"}, **over}


def test_a_users_role_from_single_sign_on_is_the_highest_its_groups_give():
    config = parse_sign_in(yaml.safe_dump({"oidc": _oidc(roles={"all": "viewer", "ops": "operator", "root": "admin"},
                                                         bodyGroups=["root"])}))
    oidc = config.oidc
    assert config.accounts == {} and oidc.issuer == "https://sso.example.com/realms/ops"
    assert oidc.role_of(["all", "ops"]) == "operator" and oidc.role_of(["root", "all"]) == "admin"
    assert oidc.role_of(["marketing"]) is None and oidc.scopes == ("openid", "profile", "email")
    assert parse_sign_in(yaml.safe_dump({"oidc": _oidc(defaultRole="viewer")})).oidc.role_of([]) == "viewer"


@pytest.mark.parametrize("over,needle", [
    ({"issuer": "http://sso.example.com"}, "must be https"),
    ({"issuer": "https://sso.example.com/?x=1"}, "without query"),
    ({"clientId": ""}, "clientId is required"),
    ({"roles": {"ops": "root"}}, "ops: 'root'"),
    ({"roles": {}}, "no role for anyone"),
    ({"scopes": ["profile"]}, "holding openid"),
    ({"redirectUrl": "https://mq.example.com/elsewhere"}, "ending in /auth/oidc/callback"),
    ({"defaultRole": "guest"}, "defaultRole must be"),
    ({"clientSecret": 42}, "clientSecret must be text"),
    ({"tenant": "x"}, "unknown keys tenant"),
])
def test_an_oidc_section_that_cannot_be_used_says_why(over, needle):
    with pytest.raises(AccountsError) as e:
        parse_sign_in(yaml.safe_dump({"oidc": _oidc(**over)}), "accounts.yaml")
    assert needle in str(e.value) and str(e.value).startswith("accounts.yaml: oidc")
