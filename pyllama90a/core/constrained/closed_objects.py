"""Objects closed by default: where a JSON schema lists `properties` and says nothing of other keys, no other key
is generated, as llama.cpp's schema converter reads it (JSON Schema itself allows any other key there, and a
small model then writes keys of its own: {"city": "Paris", "temperature": 25} for {city, unit}). A schema that
sets `additionalProperties` (or `unevaluatedProperties`) keeps its own rule.

The walk follows only the keywords that hold subschemas, so a property *named* "properties" is never taken for
the keyword. The members of an `allOf` (and a schema with an `allOf`) are left open: their properties are
checked together, and closing one member would refuse the keys that another adds.
"""
from __future__ import annotations

from typing import Any

__all__ = ["closed_objects"]

# keywords whose value is one subschema, a list of them, or a map of names to them (JSON Schema 2020-12 and
# the draft-07 spellings pydantic and older clients send)
_ONE = ("additionalProperties", "additionalItems", "items", "contains", "not", "if", "then", "else",
        "propertyNames", "unevaluatedItems", "unevaluatedProperties")
_LIST = ("anyOf", "oneOf", "allOf", "prefixItems", "items")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def _is_object_schema(node: dict[str, Any]) -> bool:
    kind = node.get("type", "object")
    return kind == "object" or (isinstance(kind, list) and "object" in kind)


def closed_objects(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` (a private copy: changed in place and returned) with `"additionalProperties": false` added to
    every object schema that has `properties` and no rule of its own for other keys."""
    stack: list[tuple[Any, bool]] = [(schema, True)]  # (subschema, may be closed)
    while stack:
        node, closable = stack.pop()
        if not isinstance(node, dict):
            continue  # (a boolean schema, or a malformed one llguidance reports)
        if (closable and isinstance(node.get("properties"), dict) and "allOf" not in node
                and "additionalProperties" not in node and "unevaluatedProperties" not in node
                and _is_object_schema(node)):
            node["additionalProperties"] = False
        for key in _ONE:
            if isinstance(node.get(key), dict):
                stack.append((node[key], True))
        for key in _LIST:
            if isinstance(node.get(key), list):
                stack.extend((sub, key != "allOf") for sub in node[key])
        for key in _MAP:
            if isinstance(node.get(key), dict):
                stack.extend((sub, True) for sub in node[key].values())
    return schema
