"""A real schema registry for the tests (Apicurio Registry from Maven Central): see registry.py."""

from tests.schema_registry.registry import SchemaRegistry, resolve_registry

__all__ = ["SchemaRegistry", "resolve_registry"]
