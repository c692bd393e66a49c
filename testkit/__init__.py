"""Support shared by the tests (``tests/``), the benchmarks (``bench/``) and ``e2e/``: one port helper,
one wait helper family, FerryMQ processes, and one harness per peer.

* :mod:`testkit.ports`       ``free_port`` (and ``free_broker_port`` for Apache brokers)
* :mod:`testkit.wait`        ``poll_until`` (blocking) and ``wait_until`` (asyncio)
* :mod:`testkit.processes`   ``FerryProcess``, ``StandaloneProcess``, ``BrokerPair``: FerryMQ servers as subprocesses
* :mod:`testkit.java_client` the official 4.9.7 Java client and ``mqadmin`` (jars from Maven Central)
* :mod:`testkit.apache`      the real Apache RocketMQ 4.9.7 name server and broker as processes
* :mod:`testkit.grpc_clients` the RocketMQ 5 gRPC clients (Java, Python, Node)
* :mod:`testkit.failover`    ``FailoverPair``, ``FailoverTrio``: broker groups under a controller (tests, e2e/chaos)
* :mod:`testkit.certificates` ``make_test_certificates``: a throw-away CA and what it signs

Not installed with FerryMQ (``pyproject.toml`` packages only ``ferrymq*``): like ``tests``, it is
imported from the repository root, which pytest puts on ``sys.path`` and each ``bench/`` script
inserts itself. It imports nothing from ``tests``.
"""
