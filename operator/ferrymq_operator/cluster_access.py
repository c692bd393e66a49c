"""How the operator reaches a Broker: a Topic's or ConsumerGroup's Broker by its reference,
and where admin calls for it go (its name servers, or an override from the settings)."""

from __future__ import annotations

from ferrymq_operator import kube
from ferrymq_operator.constants import API_VERSION
from ferrymq_operator.model import BrokerCluster
from ferrymq_operator.settings import OperatorSettings


async def broker_of(resource: dict, settings: OperatorSettings) -> BrokerCluster | None:
    """The Broker a Topic or ConsumerGroup names in spec.brokerRef; None if it does not exist."""
    ref = ((resource.get("spec") or {}).get("brokerRef") or {}).get("name")
    obj = await kube.get(API_VERSION, "Broker", resource["metadata"]["namespace"], ref) if ref else None
    return BrokerCluster.from_resource(obj, settings.broker_image) if obj is not None else None


def namesrv_addr(settings: OperatorSettings, cluster: BrokerCluster) -> str:
    """The name-server address list admin calls for ``cluster`` use."""
    return settings.namesrv_addr(cluster.namespace, cluster.name, cluster.namesrv_addresses)
