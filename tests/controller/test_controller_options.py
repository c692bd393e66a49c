"""``ferrymq controller``'s state-backend and election flags: defaults from the pod, and each
mistake refused with one line saying what is wrong."""

from __future__ import annotations

import pytest

from ferrymq.broker.ha.controller_link import controller_addresses
from ferrymq.cli.main import build_parser
from ferrymq.cli.controller_options import advertise_addr, check_flags, kubernetes_backend
from ferrymq.kube.config import KubeConfig

POD = {"POD_NAMESPACE": "ferry", "POD_NAME": "ctl-1", "POD_IP": "10.1.2.3"}


def parse(*argv: str):
    return build_parser().parse_args(["controller", *argv])


def test_kubernetes_backend_defaults_come_from_the_pod():
    args = parse("--state", "kubernetes")
    backend = kubernetes_backend(args, None, POD)
    assert (backend.namespace, backend.identity, backend.state_name, backend.lease_name) == (
        "ferry", "ctl-1", "ferrymq-controller", "ferrymq-controller")
    assert (backend.lease_duration, backend.renew_deadline, backend.retry_period) == (15.0, 10.0, 2.0)
    assert advertise_addr(args, POD) == "10.1.2.3:9878"
    # without POD_NAMESPACE: the kubeconfig context's (or the service account's) namespace
    assert kubernetes_backend(args, KubeConfig("https://k:1", namespace="ctx"), {}).namespace == "ctx"


@pytest.mark.parametrize("argv, env, message", [
    (["--state", "kubernetes"], {}, "needs --namespace"),
    (["--state", "kubernetes", "--namespace", "Bad_NS"], {}, "not a Kubernetes namespace name"),
    (["--state", "kubernetes", "--state-name", "UPPER"], POD, "--state-name 'UPPER' is not a Kubernetes object name"),
    (["--state", "kubernetes", "--lease-duration", "5", "--renew-deadline", "6"], POD, "longer than the renew deadline"),
    (["--state", "kubernetes", "--renew-deadline", "2", "--retry-period", "2"], POD, "1.2 x the retry period"),
])
def test_kubernetes_backend_refusals(argv, env, message):
    with pytest.raises(ValueError, match=message):
        kubernetes_backend(parse(*argv), None, env)


def test_kubernetes_flags_with_the_file_state_are_refused():
    with pytest.raises(ValueError, match="--lease-name, --identity only with --state kubernetes"):
        check_flags(parse("--lease-name", "x", "--identity", "me"))
    check_flags(parse("--data-dir", "/tmp/x"))


def test_advertised_address():
    assert advertise_addr(parse("--host", "127.0.0.1", "--port", "7000"), {}) == "127.0.0.1:7000"
    assert advertise_addr(parse("--advertise-addr", "ctl-0.ctl:9878"), POD) == "ctl-0.ctl:9878"
    assert advertise_addr(parse("--port", "0"), POD) == ""  # the controller names the port it bound
    with pytest.raises(ValueError, match="wildcard"):
        advertise_addr(parse("--state", "kubernetes", "--host", "0.0.0.0"), {})
    with pytest.raises(ValueError, match="host:port"):
        advertise_addr(parse("--advertise-addr", "nope"), {})


def test_controller_addr_lists_several_replicas():
    assert controller_addresses(" a:1; b:2 ;;a:1") == ["a:1", "b:2"]
    with pytest.raises(ValueError, match="'b' is not host:port"):
        controller_addresses("a:1;b")
    with pytest.raises(ValueError, match="lists no controller"):
        controller_addresses(" ; ")


def test_a_broker_config_checks_every_controller_address():
    from ferrymq.broker.config import BrokerConfig
    assert BrokerConfig(enable_controller_mode=True, controller_addr="a:9878;b:9878").role_error() is None
    assert BrokerConfig(enable_controller_mode=True, controller_addr="a:9878;b").role_error() == \
        "controllerAddr: 'b' is not host:port"
