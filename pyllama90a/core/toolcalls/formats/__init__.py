"""One partial-aware reader per family of tool-call syntax. Each module has find_start (where the next call
block starts), partial_start (a tail to hold back while streaming: it may become a block's start) and
read_block (the block's calls, complete or partial).

Modules:
    call_object: what every family shares: a call as a JSON object
    hermes: Hermes/Qwen (and the generic format)
    llama3: Llama 3.1/3.2 custom tools
    mistral: Mistral
"""
from __future__ import annotations

from types import ModuleType

from . import hermes, llama3, mistral
from .call_object import Block, PartialCall, Scanners

FAMILIES: dict[str, ModuleType] = {"hermes": hermes, "llama3": llama3, "mistral": mistral}

__all__ = ["FAMILIES", "Block", "PartialCall", "Scanners"]
