"""Finding the name servers through an address service, as RocketMQ's TopAddressing does
for brokers and clients that have no ``namesrvAddr``: ``GET http://<domain>:8080/rocketmq/
<subgroup>`` (no ``:8080`` when the domain names a port; ``-<unit>?nofix=1`` appended for a
unit), 3 s timeout, the first line of a 200 answer is the ``host:port;host:port`` list."""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger(__name__)

DEFAULT_DOMAIN = "jmenv.tbsite.net"  # RocketMQ's default rocketmq.namesrv.domain
DEFAULT_SUBGROUP = "nsaddr"
TIMEOUT = 3.0


def address_server_url(domain: str = DEFAULT_DOMAIN, subgroup: str = DEFAULT_SUBGROUP, unit: str | None = None) -> str:
    host = domain if ":" in domain else f"{domain}:8080"
    url = f"http://{host}/rocketmq/{subgroup or DEFAULT_SUBGROUP}"
    return f"{url}-{unit}?nofix=1" if unit else url


async def fetch_namesrv_addr(url: str, timeout: float = TIMEOUT) -> str | None:
    """The name-server list the service gives now; None (logged) when it gives none."""
    # Imported here: most clients never use an address service, and aiohttp is a tenth of a
    # second of import for every process that loads the client (each Spark Python worker).
    import aiohttp

    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            async with session.get(url) as response:
                text = await response.text()
                if response.status != 200:
                    log.warning("name-server address service %s answered %d: %s", url, response.status, text.strip())
                    return None
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
        log.warning("name-server address service %s unreachable: %s", url, e or type(e).__name__)
        return None
    first = text.strip().splitlines()[0].strip() if text.strip() else ""
    return first or None


async def changed_namesrv_addr(domain: str, subgroup: str, current: str) -> str | None:
    """Ask the address service of ``domain``; the list when it differs from ``current``
    (logged), None when it is the same or the service gave none (keep the last list)."""
    url = address_server_url(domain, subgroup)
    addr = await fetch_namesrv_addr(url)
    if not addr or addr == current:
        return None
    log.info("name servers from %s: %s (were %s)", url, addr, current or "none")
    return addr
