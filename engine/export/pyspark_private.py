"""pyspark's private parts engine uses, each said why, in one room (as engine.transport.aiokafka_private is
aiokafka's), checked against the installed release by tests/contract/test_pyspark_private.py.

- The JVM a session runs in: `SparkSession.stop()` stops the session but leaves the JVM pyspark launched
  for it running until Python exits (a CLI export or a test's session would leave a Java process behind).
  pyspark keeps its py4j gateway in the context's `_gateway` (the class attribute `SparkContext._gateway`,
  with `SparkContext._jvm` beside it), and the launched JVM's process as that gateway's `proc`
  (`pyspark.java_gateway.launch_gateway`); the public API has no way to stop them. Both class attributes are
  cleared after, so that a later session launches a JVM of its own instead of using the stopped one.
"""

from __future__ import annotations

from typing import Any

from engine.export.optional import needs


def launched_jvm(context: Any) -> tuple[Any, Any]:
    """(the py4j gateway, the JVM process pyspark launched) of a SparkContext; either may be None (a
    gateway given from outside, a JVM pyspark did not launch)."""
    gateway = getattr(context, "_gateway", None)
    return gateway, getattr(gateway, "proc", None)


def forget_gateway(gateway: Any) -> None:
    """Shut `gateway` down and make pyspark forget it: the next SparkContext launches a JVM of its own."""
    with needs("pyspark", "Spark export"):
        import pyspark
    gateway.shutdown()
    pyspark.SparkContext._gateway = None
    pyspark.SparkContext._jvm = None
