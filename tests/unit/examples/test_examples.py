"""Each example, driven by the test driver (engine.testing.TestDriver: a worker on virtual time, each input
processed to completion before the next) with hand-made input and hand-computed results."""

from __future__ import annotations

from engine.testing import TestDriver
from engine.windows import WindowRange
from examples import fraud, inventory, not_viewing, notifications, retail, wordcount

T0 = 1_767_225_600  # a multiple of 600: window starts are T0 + multiples of the size


def test_wordcount_counts_words() -> None:
    with TestDriver(wordcount.app) as driver:
        driver.send(wordcount.lines, value="the fox")
        assert driver.table("word-counts") == {"the": 1, "fox": 1}
        driver.send(wordcount.lines, value="The dog and the fox")
        assert driver.table("word-counts") == {"the": 3, "fox": 2, "dog": 1, "and": 1}
        assert sorted(r.key for r in driver.read(wordcount.words)) == sorted(
            ["the", "fox", "the", "dog", "and", "the", "fox"])


def test_fraud_flags_a_payment_from_a_new_country_only() -> None:
    payments = [
        fraud.Payment("1", "ada", 10, "FR"),   # first payment: the baseline
        fraud.Payment("2", "ada", 11, "FR"),
        fraud.Payment("3", "ada", 500, "BR"),  # new country: suspicious
        fraud.Payment("4", "ada", 12, "BR"),   # seen now
        fraud.Payment("5", "bob", 1, "NL"),
    ]
    with TestDriver(fraud.app) as driver:
        for payment in payments:
            driver.send(fraud.payments, key=payment.customer, value=payment)
        assert driver.table("countries-seen") == {"ada": ["FR", "BR"], "bob": ["NL"]}
        assert [r.value.id for r in driver.read(fraud.suspicious)] == ["3"]


def test_inventory_reorders_when_stock_crosses_the_threshold_once() -> None:
    with TestDriver(inventory.app) as driver:
        driver.send(inventory.shipments, key="sku-1", value=inventory.Shipment("sku-1", 20))
        assert driver.table("stock") == {"sku-1": 20}
        for quantity in (5, 4, 3, 2, 1):  # 20 -> 15 -> 11 -> 8 (crosses 10) -> 6 -> 5
            driver.send(inventory.sales, key="sku-1", value=inventory.Sale("sku-1", quantity))
        assert driver.table("stock") == {"sku-1": 5}
        driver.send(inventory.shipments, key="sku-1", value=inventory.Shipment("sku-1", 50))
        assert driver.table("stock") == {"sku-1": 55}
        assert [(r.key, r.value) for r in driver.read(inventory.reorders)] == [
            ("sku-1", inventory.Reorder("sku-1", inventory.REORDER_QUANTITY, 8))]


def test_not_viewing_notifies_users_whose_status_is_close_at_every_tick() -> None:
    events = [("ada", "Open"), ("bob", "Open"), ("ada", "Close"), ("cy", "Close"), ("cy", "Open")]
    with TestDriver(not_viewing.app) as driver:
        for user, action in events:
            driver.send(not_viewing.app_events, key=user, value=not_viewing.AppEvent(user, action))
        assert driver.table("status") == {"ada": "Close", "bob": "Open", "cy": "Open"}
        tick = not_viewing.TICK_SECONDS  # (another test's import may have set it through the environment)
        driver.advance(tick / 2)
        assert driver.read(not_viewing.notifications) == []  # no tick yet
        driver.advance(tick / 2)
        notes = driver.read(not_viewing.notifications)
        assert [(r.key, r.value.message, r.timestamp_ms) for r in notes] == [
            ("ada", "you are not viewing the app", int((T0 + tick) * 1000))]
        driver.send(not_viewing.app_events, key="bob", value=not_viewing.AppEvent("bob", "Close"))
        driver.advance(tick)
        assert sorted(r.key for r in driver.read(not_viewing.notifications)) == ["ada", "bob"]


def test_retail_counts_sales_per_product_in_ten_minute_windows_on_event_time() -> None:
    sales = [("a", 2, 10), ("b", 1, 20), ("a", 3, 590), ("a", 1, 610),
             ("a", 4, 595),   # out of order, within the minute of grace: still [0, 600)
             ("a", 5, 1300),  # stream time 1300 closes [0, 600) for good
             ("a", 7, 500)]   # late: not applied
    with TestDriver(retail.app) as driver:
        for sku, quantity, at in sales:
            driver.send(retail.sales, key=sku, value=retail.Sale(sku, quantity, 2.5, T0 + at))

        def window(start: int) -> WindowRange:
            return WindowRange(T0 + start, T0 + start + 600)

        assert driver.table("units-sold") == {("a", window(0)): 9, ("a", window(600)): 1,
                                              ("a", window(1200)): 5, ("b", window(0)): 1}
        assert driver.table("revenue")[("a", window(0))] == 9 * 2.5
        assert retail.units_sold.late_events == 1


def test_notifications_mutes_a_user_once_past_five_in_ten_minutes() -> None:
    with TestDriver(notifications.app) as driver:
        for user, minutes in [("ada", range(7)), ("bob", range(0, 30, 10))]:
            for minute in minutes:
                note = notifications.Notification(user, "come back", T0 + minute * 60)
                driver.send(notifications.sent, key=user, value=note)
        # at the 6th; the 7th does not repeat it
        assert [(r.key, r.value) for r in driver.read(notifications.mutes)] == [
            ("ada", notifications.Mute("ada", 6))]
