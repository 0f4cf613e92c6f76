"""One stand-in for engine's Consumer (engine.transport.base) where a unit test drives a part of the worker
without a broker: it keeps what it was told (paused, held back, sought, committed) in `log` and its
attributes, and answers with fixed offsets (committed 7, the log from 0 to 100)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.errors import MembershipLost

if TYPE_CHECKING:
    from collections.abc import Collection

    from engine.events import TP


class FakeConsumer:
    def __init__(self, log: list[tuple[Any, ...]] | None = None) -> None:
        self.log: list[tuple[Any, ...]] = [] if log is None else log
        self.paused: set[TP] = set()
        self.held: set[TP] = set()
        self.member = True  # False: the group moved on (confirm_membership raises)

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def pause(self, tps: Any) -> None:
        self.paused |= set(tps)

    def resume(self, tps: Any) -> None:
        self.paused -= set(tps)

    def hold_back(self, tps: Collection[TP]) -> None:
        self.held |= set(tps)

    def let_through(self, tps: Collection[TP]) -> None:
        self.held -= set(tps)

    async def committed(self, tps: Any) -> dict[TP, int | None]:
        self.log.append(("read committed", sorted(tps)))
        return dict.fromkeys(tps, 7)

    async def offsets(self, tps: Any) -> dict[TP, tuple[int, int]]:
        return dict.fromkeys(tps, (0, 100))

    def seek(self, tp: TP, offset: int) -> None:
        self.log.append(("seek", tp, offset))

    async def confirm_membership(self) -> None:
        self.log.append(("confirm",))
        if not self.member:
            raise MembershipLost("the group moved on")

    def request_rebalance(self) -> None:
        self.log.append(("rebalance",))

    async def commit(self, offsets: Any) -> None:
        self.log.append(("offsets", dict(offsets)))
