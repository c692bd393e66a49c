"""Message filters evaluated by the broker: RocketMQ's SQL92 selectors (sql92.py)."""
