"""The RocketMQ 5.x gRPC endpoint (apache/rocketmq-apis v2 ``MessagingService``), served by
every broker on its own port (``grpcListenPort``) next to the 4.x remoting port.

The generated protocol classes come from the ``rocketmq-python-client`` package (the
``grpc`` extra); without it the broker runs with gRPC off. Nothing here is imported by the
broker unless gRPC is on.
"""
