"""FerryMQ: a RocketMQ-compatible message broker on asyncio."""

__version__ = "0.1.0"
