"""`python -m tests.kafka start [--nodes 3] [--port 9092] [--security sasl_plaintext|ssl|sasl_ssl]`: run a
local Kafka in the foreground."""

from __future__ import annotations

import argparse
import signal
import sys
import time

from tests.kafka.broker import KafkaCluster, resolve_jars
from tests.kafka.reference import resolve_reference
from tests.lake import resolve_lake_jars


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.kafka")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start brokers on loopback until Ctrl-C")
    start.add_argument("--nodes", type=int, choices=(1, 3), default=1)
    start.add_argument("--port", type=int, default=9092, help="first broker port")
    start.add_argument("--security", choices=("plaintext", "sasl_plaintext", "ssl", "sasl_ssl"),
                       default="plaintext",
                       help="sasl_*: SASL/SCRAM-SHA-512 users admin/admin-secret (a super user) and "
                            "app/app-secret; *ssl: TLS with certificates made at start (in the data dir; ssl "
                            "wants a client certificate, CN=admin a super user); the standard authorizer")
    sub.add_parser("resolve", help="only resolve and cache the broker jars (and build the Kafka Streams "
                                   "reference app of the differential tests, and resolve Delta Lake's "
                                   "Spark connector)")
    args = parser.parse_args()
    if args.command == "resolve":
        print(resolve_jars())
        print(resolve_reference())
        print(*resolve_lake_jars(), sep="\n")
        return 0
    ports = [args.port + 2 * i for i in range(args.nodes)]
    cluster = KafkaCluster(args.nodes, ports=ports, security=args.security).start()
    print(f"Kafka ready at {cluster.url}  (data in {cluster.root}; Ctrl-C to stop)", flush=True)
    if cluster.certificates is not None:
        certs = cluster.certificates
        print(f"TLS: CA {certs.ca}, client certificate {certs.client_cert}, key {certs.client_key}",
              flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while all(node.running for node in cluster.nodes):
            time.sleep(1)
        print("a Kafka node exited; see its broker.log", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        cluster.stop()


if __name__ == "__main__":
    raise SystemExit(main())
