"""The pyspark private parts engine uses (engine/export/pyspark_private.py) are where it expects them in the
installed release; a test fails here, naming what moved, before an export leaves JVMs behind."""

from __future__ import annotations

import inspect

import pytest

pytest.importorskip("pyspark", reason="the spark extra: pip install 'engine-streams[spark]'")

import pyspark
from pyspark import java_gateway

from engine.export import pyspark_private

CHANGED = f"pyspark {pyspark.__version__} changed "


def test_the_gateway_and_the_jvm_are_where_engine_finds_them() -> None:
    assert hasattr(pyspark.SparkContext, "_gateway"), f"{CHANGED}SparkContext._gateway"
    assert hasattr(pyspark.SparkContext, "_jvm"), f"{CHANGED}SparkContext._jvm"
    assert "gateway.proc = " in inspect.getsource(java_gateway.launch_gateway), f"{CHANGED}launch_gateway"
    context = type("Context", (), {"_gateway": type("Gateway", (), {"proc": "the JVM"})()})()
    assert pyspark_private.launched_jvm(context)[1] == "the JVM"
    assert pyspark_private.launched_jvm(object()) == (None, None)
