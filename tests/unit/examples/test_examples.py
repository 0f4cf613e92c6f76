"""Each example, run on the in-memory broker with hand-made input and hand-computed results."""

from __future__ import annotations

import asyncio
import os

os.environ.setdefault("NOT_VIEWING_TICK_SECONDS", "0.05")

from engine import testing
from examples import fraud, inventory, not_viewing, notifications, retail, wordcount


def gather(app, topic, name):
    seen: list = []

    @app.agent(topic, name=name)
    async def collect(stream):
        async for key, value in stream.items():
            seen.append((key, value))

    return seen


async def test_wordcount_counts_words():
    async with testing.running(wordcount.app, store="memory://"):
        for line in ["the fox", "The dog and the fox"]:
            await wordcount.lines.send(value=line)
        expected = {"the": 3, "fox": 2, "dog": 1, "and": 1}
        await testing.eventually(lambda: dict(wordcount.counts.items()) == expected)


async def test_fraud_flags_a_payment_from_a_new_country_only():
    flagged = gather(fraud.app, fraud.suspicious, "test_flagged")
    payments = [
        fraud.Payment("1", "ada", 10, "FR"),   # first payment: the baseline
        fraud.Payment("2", "ada", 11, "FR"),
        fraud.Payment("3", "ada", 500, "BR"),  # new country: suspicious
        fraud.Payment("4", "ada", 12, "BR"),   # seen now
        fraud.Payment("5", "bob", 1, "NL"),
    ]
    async with testing.running(fraud.app, store="memory://"):
        for payment in payments:
            await fraud.payments.send(key=payment.customer, value=payment)
        await testing.eventually(lambda: dict(fraud.countries_seen.items()).get("bob") == ["NL"])
        await testing.eventually(lambda: dict(fraud.countries_seen.items()).get("ada") == ["FR", "BR"])
    assert [p.id for _, p in flagged] == ["3"]


async def test_inventory_reorders_when_stock_crosses_the_threshold_once():
    reorders = gather(inventory.app, inventory.reorders, "test_reorders")
    async with testing.running(inventory.app, store="memory://"):
        await inventory.shipments.send(key="sku-1", value=inventory.Shipment("sku-1", 20))
        await testing.eventually(lambda: dict(inventory.stock.items()) == {"sku-1": 20})
        for quantity in (5, 4, 3, 2, 1):  # 20 -> 15 -> 11 -> 8 (crosses 10) -> 6 -> 5
            await inventory.sales.send(key="sku-1", value=inventory.Sale("sku-1", quantity))
        await testing.eventually(lambda: dict(inventory.stock.items()) == {"sku-1": 5})
        await inventory.shipments.send(key="sku-1", value=inventory.Shipment("sku-1", 50))
        await testing.eventually(lambda: dict(inventory.stock.items()) == {"sku-1": 55})
        await testing.eventually(lambda: len(reorders) == 1)
    assert reorders == [("sku-1", inventory.Reorder("sku-1", inventory.REORDER_QUANTITY, 8))]


async def test_not_viewing_notifies_users_whose_status_is_close():
    sent = gather(not_viewing.app, not_viewing.notifications, "test_sent")
    events = [("ada", "Open"), ("bob", "Open"), ("ada", "Close"), ("cy", "Close"), ("cy", "Open")]
    async with testing.running(not_viewing.app, store="memory://"):
        for user, action in events:
            await not_viewing.app_events.send(key=user, value=not_viewing.AppEvent(user, action))
        await testing.eventually(lambda: dict(not_viewing.status.items())
                                 == {"ada": "Close", "bob": "Open", "cy": "Open"})
        await testing.eventually(lambda: len(sent) >= 2)
    assert {user for user, _ in sent} == {"ada"}
    assert all(note.message == "you are not viewing the app" for _, note in sent)


T0 = 1_767_225_600  # a multiple of 600: window starts are T0 + multiples of the size


async def test_retail_counts_sales_per_product_in_ten_minute_windows_on_event_time():
    sales = [("a", 2, 10), ("b", 1, 20), ("a", 3, 590), ("a", 1, 610),
             ("a", 4, 595),   # out of order, within the minute of grace: still [0, 600)
             ("a", 5, 1300),  # stream time 1300 closes [0, 600) for good
             ("a", 7, 500)]   # late: not applied
    async with testing.running(retail.app, store="memory://"):
        for sku, quantity, at in sales:
            await retail.sales.send(key=sku, value=retail.Sale(sku, quantity, 2.5, T0 + at))
        expected = {("a", T0 * 1000): 9, ("a", (T0 + 600) * 1000): 1, ("a", (T0 + 1200) * 1000): 5,
                    ("b", T0 * 1000): 1}
        await testing.eventually(lambda: dict(retail.units_sold.table.items()) == expected)
        await testing.eventually(lambda: retail.units_sold.late_events == 1)
        assert dict(retail.revenue.table.items())[("a", T0 * 1000)] == 9 * 2.5


async def test_notifications_mutes_a_user_once_past_five_in_ten_minutes():
    muted = gather(notifications.app, notifications.mutes, "test_mutes")
    async with testing.running(notifications.app, store="memory://"):
        for user, minutes in [("ada", range(7)), ("bob", range(0, 30, 10))]:
            for minute in minutes:
                note = notifications.Notification(user, "come back", T0 + minute * 60)
                await notifications.sent.send(key=user, value=note)
        await testing.eventually(lambda: len(muted) == 1)
        await asyncio.sleep(0.1)
    assert muted == [("ada", notifications.Mute("ada", 6))]  # at the 6th; the 7th does not repeat it
