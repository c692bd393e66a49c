"""The pure pieces of ferrymq.kube: the election's rules (who may take a Lease, what a claim
writes, which timings are allowed), kubeconfig and in-cluster configuration, a token file read
again when it changes, API paths, and a request timeout against a server that never answers.
The calls themselves run against a real kube-apiserver in tests/k8s/test_controller_lease.py."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time

import pytest

from ferrymq.kube.client import CONFIG_MAPS, LEASES, KubeClient, KubeConnectionError
from ferrymq.kube.config import KubeConfig, KubeConfigError, TokenSource
from ferrymq.kube.election import LeaseRecord, claimed_record, held_by_other, micro_time, validate_timings


def test_a_lease_is_held_by_another_only_while_its_record_changed_within_a_lease_duration_locally():
    rec = LeaseRecord("other", 15, "t0", "t1", 2)
    assert held_by_other(rec, "me", observed_at=100.0, now=114.9, default_duration=30)
    assert not held_by_other(rec, "me", observed_at=100.0, now=115.0, default_duration=30)  # lapsed
    assert not held_by_other(rec, "other", observed_at=100.0, now=101.0, default_duration=30)  # it is mine
    assert not held_by_other(LeaseRecord("", 15), "me", observed_at=100.0, now=100.0, default_duration=30)  # free
    # a record without a duration: the candidate's own
    assert held_by_other(LeaseRecord("other", 0), "me", observed_at=100.0, now=129.0, default_duration=30)


def test_a_claim_keeps_acquire_time_and_transitions_on_renewal_and_counts_a_takeover():
    mine = LeaseRecord("me", 15, "acq", "old", 3)
    assert claimed_record(mine, "me", 15, "now") == LeaseRecord("me", 15, "acq", "now", 3)
    assert claimed_record(LeaseRecord("other", 15, "a", "b", 3), "me", 15, "now") == LeaseRecord("me", 15, "now", "now", 4)
    assert claimed_record(LeaseRecord("", 1, "a", "b", 4), "me", 15, "now") == LeaseRecord("me", 15, "now", "now", 4)
    assert claimed_record(None, "me", 15, "now") == LeaseRecord("me", 15, "now", "now", 0)
    lease = {"spec": claimed_record(None, "me", 15, micro_time(0)).to_spec()}
    assert LeaseRecord.of(lease) == LeaseRecord("me", 15, "1970-01-01T00:00:00.000000Z", "1970-01-01T00:00:00.000000Z", 0)


@pytest.mark.parametrize("timings, error", [
    ((15, 10, 2), None),
    ((10, 10, 2), "longer than the renew deadline"),
    ((15, 10, 9), "1.2 x the retry period"),
    ((15, 10, 0), "positive"),
])
def test_timings_must_let_the_leader_give_up_before_others_take_over(timings, error):
    if error is None:
        validate_timings(*timings)
    else:
        with pytest.raises(ValueError, match=error):
            validate_timings(*timings)


def test_resource_paths():
    assert LEASES.path("ns", "l") == "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l"
    assert CONFIG_MAPS.path("ns") == "/api/v1/namespaces/ns/configmaps"


def write_kubeconfig(path, user: dict, *, cluster_extra: dict | None = None, context_ns: str = "") -> None:
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
           "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443", **(cluster_extra or {})}}],
           "users": [{"name": "u", "user": user}],
           "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": context_ns}},
                        {"name": "other", "context": {"cluster": "k", "user": "u"}}]}
    path.write_text(json.dumps(cfg))


def test_kubeconfig_with_a_client_certificate_resolves_files_relative_to_it(tmp_path):
    write_kubeconfig(tmp_path / "kc", {"client-certificate": "pki/a.crt", "client-key": "pki/a.key"},
                     cluster_extra={"certificate-authority": "pki/ca.crt"}, context_ns="team")
    cfg = KubeConfig.from_kubeconfig(tmp_path / "kc")
    assert (cfg.server, cfg.client_cert, cfg.client_key, cfg.ca_file, cfg.namespace) == (
        "https://127.0.0.1:6443", str(tmp_path / "pki/a.crt"), str(tmp_path / "pki/a.key"),
        str(tmp_path / "pki/ca.crt"), "team")
    assert KubeConfig.from_kubeconfig(tmp_path / "kc", context="other").namespace == ""


def test_kubeconfig_with_a_token_and_inline_data(tmp_path):
    write_kubeconfig(tmp_path / "kc", {"token": "abc"},
                     cluster_extra={"certificate-authority-data": base64.b64encode(b"PEM").decode()})
    cfg = KubeConfig.from_kubeconfig(tmp_path / "kc")
    assert (cfg.bearer_token(), cfg.ca_data) == ("abc", b"PEM")
    write_kubeconfig(tmp_path / "kc2", {"client-certificate-data": base64.b64encode(b"C").decode(),
                                        "client-key-data": base64.b64encode(b"K").decode()})
    cfg = KubeConfig.from_kubeconfig(tmp_path / "kc2")
    assert open(cfg.client_cert, "rb").read() == b"C" and open(cfg.client_key, "rb").read() == b"K"
    assert os.stat(cfg.client_key).st_mode & 0o077 == 0


@pytest.mark.parametrize("user, message", [
    ({"exec": {"command": "aws"}}, "exec/auth-provider"),
    ({"client-certificate": "a.crt"}, "needs its key"),
])
def test_kubeconfig_refusals_say_why(tmp_path, user, message):
    write_kubeconfig(tmp_path / "kc", user)
    with pytest.raises(KubeConfigError, match=message):
        KubeConfig.from_kubeconfig(tmp_path / "kc")
    with pytest.raises(KubeConfigError, match="no context named 'nope'"):
        KubeConfig.from_kubeconfig(tmp_path / "kc", context="nope")


def test_in_cluster_reads_the_service_account(tmp_path):
    with pytest.raises(KubeConfigError, match="not in a Kubernetes pod"):
        KubeConfig.in_cluster({}, tmp_path)
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(KubeConfigError, match="no service account token"):
        KubeConfig.in_cluster(env, tmp_path)
    (tmp_path / "token").write_text("t1\n")
    (tmp_path / "namespace").write_text("ferry")
    cfg = KubeConfig.in_cluster(env, tmp_path)
    assert (cfg.server, cfg.namespace, cfg.ca_file, cfg.bearer_token()) == (
        "https://10.0.0.1:443", "ferry", str(tmp_path / "ca.crt"), "t1")
    assert KubeConfig.in_cluster({**env, "KUBERNETES_SERVICE_HOST": "fd00::1"}, tmp_path).server == "https://[fd00::1]:443"


def test_a_token_file_is_read_again_when_it_changes(tmp_path, monkeypatch):
    token = tmp_path / "token"
    token.write_text("first")
    source = TokenSource(token)
    assert source.token() == "first"
    token.write_text("second")
    os.utime(token, (time.time() + 5, time.time() + 5))  # a new modification time, as a kubelet rotation gives
    assert source.token() == "first"  # checked at most every TOKEN_CHECK_S ...
    assert source.token(force=True) == "second"  # ... or at once after a 401
    token.write_text("third")
    os.utime(token, (time.time() + 10, time.time() + 10))
    monkeypatch.setattr("ferrymq.kube.config.TOKEN_CHECK_S", 0.0)
    assert source.token() == "third"


async def test_every_request_has_a_timeout_even_when_the_server_accepts_and_never_answers():
    accepted = asyncio.Event()

    async def silent(reader, writer):
        accepted.set()
        await reader.read()  # holds the connection open, never answers
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = KubeClient(KubeConfig(f"http://127.0.0.1:{port}"), timeout=0.3)
    try:
        started = time.monotonic()
        with pytest.raises(KubeConnectionError, match="no answer within 0.3 s"):
            await client.get(LEASES, "ns", "l")
        assert accepted.is_set() and time.monotonic() - started < 5
        with pytest.raises(KubeConnectionError, match="no answer within 0.1 s"):
            await client.get(LEASES, "ns", "l", timeout=0.1)
        with pytest.raises(ValueError, match="resourceVersion is required"):
            await client.replace(CONFIG_MAPS, "ns", "c", {"metadata": {}})
    finally:
        await client.close()
        server.close()
        await server.wait_closed()
