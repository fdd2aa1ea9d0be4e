"""What the client matrix checks (run.py): the APIs, the checks, their prompts and budgets, the pydantic model
and the tool every client is given, and the helpers that turn an answer into a check's result."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

APIS = ("chat", "responses", "messages")
CHECKS = ("chat", "stream", "tools", "structured")
KEY = "sk-local"
CHAT_PROMPT = "Say hello in one short sentence."
TOOL_PROMPT = "What is the weather in Paris? Use the get_weather tool."
STRUCT_PROMPT = "What is the capital of France? Answer with the city and its country."
MAX_TOKENS = 32  # short answers: a 2-core machine shared by others runs the matrix
STRUCT_TOKENS = 96  # a structured answer as a tool call (`<tool_call>{"name": ..., "arguments": ...}`) is longer


class Capital(BaseModel):
    city: str
    country: str


def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return f"Sunny and 21 C in {city}."


WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER_DESC = "Get the current weather in a city."


class NotOffered(Exception):
    """The client does not offer this check against a custom base URL (a client limitation)."""


def one_call(calls: list[Any]) -> Any:
    if len(calls) != 1:
        raise AssertionError(f"expected exactly one tool call, got {len(calls)}: {calls!r}"[:300])
    return calls[0]


def text_of(text: str) -> str:
    if not text.strip():
        raise AssertionError("empty answer")
    return text.strip()[:80]


def five(parse: Callable[[], Capital]) -> str:
    """Structured output: 5 requests at temperature 0, each must parse into Capital."""
    answers = [parse() for _ in range(5)]
    return f"5/5 parsed: {answers[0].model_dump()}"
