"""/metrics in Prometheus' text format: requests, tokens, queue, slots, throughput, KV cache; and the same
counts under llama-server's names (llamacpp:*), for dashboards made for it."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..core.engine.engine import BatchEngine, EngineStats
    from ..core.model.memory_plan import KVCacheInfo
    from .executors import PoolUsage
    from .worker_recovery import WorkerRecovery

PREFIX = "pyllama90a_"
LLAMA_SERVER_PREFIX = "llamacpp:"


def _family(lines: list[str], name: str, kind: str, help_text: str, samples: list[tuple[str, float]],
            prefix: str = PREFIX) -> None:
    lines.append(f"# HELP {prefix}{name} {help_text}")
    lines.append(f"# TYPE {prefix}{name} {kind}")
    lines.extend(f"{prefix}{name}{labels} {_number(value)}" for labels, value in samples)


def _number(value: float) -> str:
    """A sample as Prometheus reads it, exactly: a counter of seconds keeps its last digits as it grows (6
    significant digits lost 0.1 ms a scrape past 10 s, and a rate over two scrapes twice that)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _llama_server_families(lines: list[str], stats: EngineStats, seconds: Mapping[str, float]) -> None:
    """llama-server's metrics, counted as it counts them (embeddings' prompts and decodes too; n_tokens_max: its
    type, a counter, though a maximum).
    Its prompt tokens are the decoded ones; the seconds are the server's timings of finished requests (a
    request's prompt time includes its wait for a slot). `stats`: the scrape's one reading of the engine."""
    prompt_s, predicted_s = seconds.get("prompt", 0.0), seconds.get("predicted", 0.0)
    timed_prompt, timed_predicted = seconds.get("prompt_n", 0), seconds.get("predicted_n", 0)
    for name, kind, text, value in (
            ("prompt_tokens_total", "counter", "Number of prompt tokens processed.",
             stats.prompt_tokens_decoded + seconds.get("embedding_tokens", 0)),
            ("prompt_tokens_cached_total", "counter", "Number of prompt tokens reused from a slot's cache.",
             stats.prompt_tokens_total - stats.prompt_tokens_decoded),
            ("prompt_seconds_total", "counter", "Prompt process time in seconds.", prompt_s),
            ("tokens_predicted_total", "counter", "Number of generation tokens processed.",
             stats.completion_tokens_total),
            ("tokens_predicted_seconds_total", "counter", "Predict process time in seconds.", predicted_s),
            ("prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.",
             timed_prompt / prompt_s if prompt_s > 0 else 0),
            ("predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.",
             timed_predicted / predicted_s if predicted_s > 0 else 0),
            ("requests_processing", "gauge", "Number of requests processing.", stats.busy_slots),
            ("requests_deferred", "gauge", "Number of requests deferred.", stats.queue_depth),
            ("spec_decode_num_draft_tokens_total", "counter",
             "Total draft tokens generated (0 when spec-decode is off).", stats.draft_tokens_total),
            ("spec_decode_num_accepted_tokens_total", "counter",
             "Total draft tokens accepted by the target model (0 when spec-decode is off).",
             stats.draft_accepted_total),
            ("spec_decode_num_drafts_total", "counter", "Total drafts verified (0 when spec-decode is off).",
             stats.drafts_total),
            ("n_decode_total", "counter", "Total number of llama_decode() calls.",
             stats.decodes_total + seconds.get("embedding_decodes", 0)),
            ("n_tokens_max", "counter", "Largest observed n_tokens.", stats.tokens_max),
            ("n_busy_slots_per_decode", "gauge", "Average number of busy slots per llama_decode() call.",
             stats.decode_slots_total / stats.decodes_total if stats.decodes_total else 0)):
        _family(lines, name, kind, text, [("", value)], prefix=LLAMA_SERVER_PREFIX)


def render_metrics(engine: BatchEngine, kv: KVCacheInfo, responses: Mapping[tuple[str, int], int],
                   seconds: Mapping[str, float] | None = None, workers: WorkerRecovery | None = None,
                   pools: Sequence[PoolUsage] = ()) -> str:
    """The engine's counters and configuration (`kv`: its KV cache's, read once: ServerState.kv_cache), the HTTP
    responses counted by (route, status code), and llama-server's families; `seconds`: the summed timings of
    finished requests (prompt, predicted seconds and the token counts they timed) and embeddings' tokens and
    decodes (embedding_tokens, embedding_decodes); `workers`: the RPC workers'
    losses and the reloads after them; `pools`: the worker threads' use by kind of work (server/executors.py)."""
    stats = engine.stats()
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
    _family(lines, "draft_tokens_total", "counter", "Speculative decoding: tokens drafted and verified.",
            [("", stats.draft_tokens_total)])
    _family(lines, "draft_accepted_total", "counter", "Speculative decoding: drafted tokens kept.",
            [("", stats.draft_accepted_total)])
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
    if workers is not None:
        _family(lines, "rpc_workers_lost", "gauge", "RPC workers whose connection is lost now (generation refused).",
                [("", len(workers.lost_workers()))])
        _family(lines, "rpc_worker_losses_total", "counter", "Losses of RPC workers seen.", [("", workers.losses)])
        _family(lines, "rpc_reloads_total", "counter", "Model loads again after lost RPC workers came back.",
                [("", workers.reloads)])
    for name, text, attr in (("pool_threads", "Worker threads by kind of work.", "threads"),
                             ("pool_running", "Jobs running on a kind's worker threads.", "running"),
                             ("pool_waiting", "Jobs waiting for a kind's worker threads.", "waiting")):
        _family(lines, name, "gauge", text, [(f'{{kind="{u.kind}"}}', getattr(u, attr)) for u in pools])
    _family(lines, "pool_refused_total", "counter", "Requests answered 429 because a kind's queue was full.",
            [(f'{{kind="{u.kind}"}}', u.refused) for u in pools])
    _llama_server_families(lines, stats, seconds or {})
    return "\n".join(lines) + "\n"
