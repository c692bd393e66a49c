"""How the operator reaches a Broker: a Topic's or ConsumerGroup's Broker by its reference,
and where admin calls for it go (its name servers, or an override from the settings)."""

from __future__ import annotations

import contextlib
from typing import Awaitable, Callable

from ferrymq.acl.signature import Credentials
from ferrymq.client.admin import AdminClient
from ferrymq.remoting.tls import ClientTls
from ferrymq_operator import broker_admin, kube
from ferrymq_operator.acl import OPERATOR_ACCESS_KEY, SECRET_KEY_FIELD, decode_secret_field
from ferrymq_operator.conditions import Condition
from ferrymq_operator.constants import API_VERSION
from ferrymq_operator.model import BrokerCluster
from ferrymq_operator.settings import OperatorSettings
from ferrymq_operator.views import ResourceView

BrokerStep = Callable[[AdminClient, dict[str, str]], Awaitable[None]]


async def broker_of(resource: dict, settings: OperatorSettings) -> BrokerCluster | None:
    """The Broker a Topic or ConsumerGroup names in spec.brokerRef; None if it does not exist."""
    res = ResourceView(resource)
    return await broker_named(res.namespace, res.broker_ref, settings)


async def broker_named(namespace: str, name: str | None, settings: OperatorSettings) -> BrokerCluster | None:
    """The model of the Broker ``namespace/name``; None if it does not exist (or no name)."""
    obj = await kube.get(API_VERSION, "Broker", namespace, name) if name else None
    return BrokerCluster.from_resource(obj, settings.broker_image) if obj is not None else None


def namesrv_addr(settings: OperatorSettings, cluster: BrokerCluster) -> str:
    """The name-server address list admin calls for ``cluster`` use."""
    return settings.namesrv_addr(cluster.namespace, cluster.name, cluster.namesrv_addresses)


async def operator_credentials(cluster: BrokerCluster) -> Credentials | None:
    """The operator's admin account for a Broker with ACL on (None before its Secret exists)."""
    if not cluster.acl_enabled:
        return None
    secret = await kube.get("v1", "Secret", cluster.namespace, cluster.names.operator_secret)
    secret_key = decode_secret_field(secret, SECRET_KEY_FIELD)
    return Credentials(OPERATOR_ACCESS_KEY, secret_key) if secret_key else None


def client_tls(cluster: BrokerCluster) -> ClientTls | None:
    """TLS for the operator's connections to ``cluster`` when it has TLS on: the certificate
    is accepted as is (the operator talks to pods it created, by their Service names)."""
    return ClientTls(insecure=True) if cluster.tls_secret else None


@contextlib.asynccontextmanager
async def admin_client(settings: OperatorSettings, cluster: BrokerCluster):
    """An AdminClient for ``cluster``'s name servers and brokers: signed with the operator's
    account when the Broker has ACL on, over TLS when it has TLS (``client_tls``)."""
    credentials = await operator_credentials(cluster)
    async with broker_admin.connect(namesrv_addr(settings, cluster), settings.admin_timeout, credentials,
                                    client_tls(cluster)) as admin:
        yield admin


async def on_brokers(settings: OperatorSettings, cluster: BrokerCluster, step: BrokerStep) -> Condition | None:
    """Run ``step(admin, addrs)`` against ``cluster``'s registered brokers (``addrs``: brokerName ->
    address). Returns the not-Ready condition that ended it early (NoBrokers: none registered
    yet; BrokerUnreachable: any failure, retried by the next resync), None once it ran."""
    try:
        async with admin_client(settings, cluster) as admin:
            addrs = await broker_admin.brokers(admin, cluster.name)
            if not addrs:
                return Condition("Ready", False, "NoBrokers", "no broker of this Broker is registered yet")
            await step(admin, addrs)
    except Exception as e:  # noqa: BLE001 - reported, retried by the timer
        return Condition("Ready", False, "BrokerUnreachable", f"{type(e).__name__}: {e}")
    return None
