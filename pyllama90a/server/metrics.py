"""/metrics in Prometheus' text format: requests, tokens, queue, slots, throughput, KV cache."""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..engine import BatchEngine

PREFIX = "pyllama90a_"


def _family(lines: list[str], name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
    lines.append(f"# HELP {PREFIX}{name} {help_text}")
    lines.append(f"# TYPE {PREFIX}{name} {kind}")
    lines.extend(f"{PREFIX}{name}{labels} {_number(value)}" for labels, value in samples)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.6g}"


def render_metrics(engine: BatchEngine, responses: Mapping[tuple[str, int], int]) -> str:
    """The engine's counters and configuration, and the HTTP responses counted by (route, status code)."""
    stats = engine.stats()
    kv = engine.model.kv_cache
    attention = engine.model.attention
    lines: list[str] = []
    _family(lines, "engine_up", "gauge", "1 while the engine thread serves requests; 0 once it stopped or failed.",
            [("", int(engine.running))])
    _family(lines, "http_responses_total", "counter", "HTTP responses by route and status code.",
            [(f'{{route="{route}",code="{code}"}}', n) for (route, code), n in sorted(responses.items())])
    _family(lines, "requests_total", "counter", "Generation requests accepted by the engine.",
            [("", stats.requests_total)])
    _family(lines, "requests_failed_total", "counter", "Generation requests that ended in an error.",
            [("", stats.requests_failed)])
    _family(lines, "prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
            [("", stats.prompt_tokens_total)])
    _family(lines, "prompt_tokens_decoded_total", "counter",
            "Prompt tokens decoded (the others were reused from a slot's cache).", [("", stats.prompt_tokens_decoded)])
    _family(lines, "completion_tokens_total", "counter", "Generated tokens.", [("", stats.completion_tokens_total)])
    _family(lines, "queue_depth", "gauge", "Requests waiting for a free slot.", [("", stats.queue_depth)])
    _family(lines, "slots_busy", "gauge", "Slots generating or prefilling.", [("", stats.busy_slots)])
    _family(lines, "slots_total", "gauge", "Slots (--parallel).", [("", stats.parallel)])
    _family(lines, "generation_tokens_per_second", "gauge", "Generated tokens per second, last 5 seconds.",
            [("", stats.tokens_per_s)])
    _family(lines, "kv_cache_bytes", "gauge", "Bytes of the K and V caches.",
            [(f'{{cache="k",type="{kv.type_k}"}}', kv.k_bytes), (f'{{cache="v",type="{kv.type_v}"}}', kv.v_bytes)])
    _family(lines, "kv_cache_info", "gauge", "KV cache configuration (value is always 1).",
            [(f'{{type_k="{kv.type_k}",type_v="{kv.type_v}",n_ctx="{kv.n_ctx}",n_ctx_slot="{engine.n_ctx_slot}",'
              f'flash_attn="{attention.flash_attn}"}}', 1)])
    return "\n".join(lines) + "\n"
