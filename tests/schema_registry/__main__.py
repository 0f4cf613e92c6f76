"""`python -m tests.schema_registry start [--port 8081]`: run a schema registry in the foreground;
`python -m tests.schema_registry resolve`: only fetch and cache it."""

from __future__ import annotations

import argparse
import signal
import sys
import time

from tests.schema_registry.registry import SchemaRegistry, resolve_registry


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.schema_registry")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start a registry on loopback until Ctrl-C")
    start.add_argument("--port", type=int, default=8081)
    sub.add_parser("resolve", help="only fetch and cache the registry")
    args = parser.parse_args()
    if args.command == "resolve":
        print(resolve_registry())
        return 0
    registry = SchemaRegistry(args.port).start()
    print(f"schema registry ready at {registry.url}  (Ctrl-C to stop)", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while registry.running:
            time.sleep(1)
        print(f"the registry exited; see {registry.log_path}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        registry.stop()


if __name__ == "__main__":
    sys.exit(main())
