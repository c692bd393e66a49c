"""Compatibility tests: the official Apache RocketMQ 4.9.7 jars as peers (the peers: testkit/java_client.py, testkit/apache.py, testkit/grpc_clients.py)."""
