"""One partial-aware reader per family of tool-call syntax. Each module has find_start (where the next call
block starts), partial_start (a tail to hold back while streaming: it may become a block's start) and
read_block (the block's calls, complete or partial)."""
from __future__ import annotations

from types import ModuleType

from . import hermes, llama3, mistral
from .call_object import Block, PartialCall, Scanners

FAMILIES: dict[str, ModuleType] = {"hermes": hermes, "llama3": llama3, "mistral": mistral}

__all__ = ["FAMILIES", "Block", "PartialCall", "Scanners"]
