#!/usr/bin/env bash
# Batch analytics on exported table snapshots: installs the spark extra into .venv, then runs
# examples/spark_report.py (in-memory broker, RocksDB stores in a temp dir, a local Spark session).
set -euo pipefail
. "$(dirname "$0")/../.ci/bootstrap.sh" spark
exec .venv/bin/python -m examples.spark_report
