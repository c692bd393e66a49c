"""Compatibility tests: the official Apache RocketMQ 4.9.7 jars as peers (testkit/java_client.py,
testkit/apache.py) and the RocketMQ 5 gRPC clients (testkit/grpc_clients.py)."""
