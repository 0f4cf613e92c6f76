"""Protobuf message classes for the tests, built from descriptors (no protoc): `shop.proto`, which imports
`money.proto`, holds `Order` (with a nested `Line`) and `Refund`."""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto

_pool = descriptor_pool.DescriptorPool()


def _file(name: str, package: str, deps: list[str]) -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(name=name, package=package, syntax="proto3")
    file.dependency.extend(deps)
    return file


def _field(message: descriptor_pb2.DescriptorProto, name: str, number: int, kind: int,
           type_name: str = "", repeated: bool = False) -> None:
    field = message.field.add(name=name, number=number, type=kind,
                              label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
    if type_name:
        field.type_name = type_name


money = _file("money.proto", "tests.money", [])
amount = money.message_type.add(name="Money")
_field(amount, "currency", 1, F.TYPE_STRING)
_field(amount, "cents", 2, F.TYPE_INT64)

shop = _file("shop.proto", "tests.shop", ["money.proto"])
order = shop.message_type.add(name="Order")
_field(order, "item", 1, F.TYPE_STRING)
_field(order, "qty", 2, F.TYPE_INT32)
_field(order, "price", 3, F.TYPE_MESSAGE, ".tests.money.Money")
line = order.nested_type.add(name="Line")
_field(line, "sku", 1, F.TYPE_STRING)
_field(order, "lines", 4, F.TYPE_MESSAGE, ".tests.shop.Order.Line", repeated=True)
refund = shop.message_type.add(name="Refund")
_field(refund, "order_item", 1, F.TYPE_STRING)

_pool.Add(money)
_pool.Add(shop)
Money = message_factory.GetMessageClass(_pool.FindMessageTypeByName("tests.money.Money"))
Order = message_factory.GetMessageClass(_pool.FindMessageTypeByName("tests.shop.Order"))
Line = message_factory.GetMessageClass(_pool.FindMessageTypeByName("tests.shop.Order.Line"))
Refund = message_factory.GetMessageClass(_pool.FindMessageTypeByName("tests.shop.Refund"))
