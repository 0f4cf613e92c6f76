"""The service tree's own logging: quiet at INFO."""

from __future__ import annotations

import logging

from agents import Service


async def test_starting_and_stopping_a_tree_logs_nothing_at_info(caplog):
    """mode's "Starting..."/"Stopping..." for every service of the tree are DEBUG: at INFO a two-agent
    worker logged some fifteen of them at each start and stop."""

    class Leaf(Service):
        pass

    root = Service("root")
    for n in range(3):
        root.add_child(Leaf(f"leaf-{n}"))
    with caplog.at_level(logging.DEBUG):
        await root.start()
        await root.stop()
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name.startswith(("agents", "mode"))]
    assert [message for level, message in said if level >= logging.INFO] == []
    assert any("Starting..." in message for _, message in said)  # (still there, at DEBUG)
