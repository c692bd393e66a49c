"""Compatibility tests: the official Apache RocketMQ 4.9.7 jars as peers (see harness.py)."""
