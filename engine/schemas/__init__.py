"""Keys and values in Confluent's wire format through a schema registry: Avro, Protobuf and JSON Schema
(`app.topic("orders", value_type=Order, value_serializer=Avro())`). The formats: engine.schemas.formats;
the registry: engine.schemas.registry; the codecs: engine.schemas.codecs and one module per format."""

from engine.schemas.formats import Avro, JsonSchema, Protobuf, SchemaFormat

__all__ = ["Avro", "JsonSchema", "Protobuf", "SchemaFormat"]
