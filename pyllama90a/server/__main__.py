"""`python -m pyllama90a.server`: settings from flags, or from PYLLAMA90A_* environment variables."""
from __future__ import annotations

import argparse
import copy
import math
import os
import re
import socket
import sys
from pathlib import Path

from ..core.generation.speculative import SPEC_TYPES
from ..native.kv_types import FLASH_ATTN_MODES, KV_TYPES
from .executors import DEFAULT_QUEUE, Executors
from .protocol.base import UNKNOWN_FIELDS_MODES, Limits
from .response_store import DEFAULT_STORED_RESPONSES, ResponseStore
from .slot_policy import DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES, byte_size, slot_folder_of

ENV = "PYLLAMA90A_"

# flags of the limits on untrusted programs: flag -> (setting, type, help); defaults from the settings' classes
_ISOLATION_FLAGS = {
    "constraint-max-bytes": ("max_bytes", int, "largest grammar, regex or JSON schema (as JSON text), in bytes; "
                                               "more is a 400 naming the field"),
    "constraint-max-rules": ("max_rules", int, "most rules of a GBNF/Lark grammar"),
    "constraint-max-depth": ("max_depth", int, "deepest nesting of a schema's objects/arrays or a grammar's groups"),
    "constraint-max-refs": ("max_refs", int, "most $ref in one JSON schema"),
    "constraint-max-ref-depth": ("max_ref_depth", int, "longest chain of $ref through $ref"),
    "constraint-max-enum": ("max_enum", int, "most values of one enum"),
    "constraint-max-properties": ("max_properties", int, "most properties of one schema object"),
    "constraint-max-nodes": ("max_nodes", int, "most objects in one JSON schema"),
    "constraint-max-repeat": ("max_repeat", int, "largest product of a regex's nested {n,m} repetition counts"),
    "constraint-compile-timeout": ("compile_timeout_s", float, "seconds a constraint may take to compile (in a "
                                   "worker process, killed after it): more is a 400"),
    "template-timeout": ("render_timeout_s", float, "seconds a chat template may take to compile or render (in a "
                         "worker process, killed after it): more is a 400"),
    "template-max-output": ("max_output_chars", int, "most characters a chat template may output"),
    "isolation-memory-mb": ("memory_mb", int, "MiB of address space a compile/render worker process may add"),
    "isolation-workers": ("max_workers", int, "compile/render worker processes at a time"),
}


def _isolation_settings() -> dict[str, object]:
    from ..core.chat import render
    from ..core.constrained import isolation, limits

    return {**limits.ConstraintLimits().__dict__, **render.TemplateLimits().__dict__,
            **isolation.Settings().__dict__}


def apply_isolation_flags(args: argparse.Namespace) -> None:
    """Set the constraint, template and worker limits from the parsed flags (ValueError naming a bad one)."""
    from ..core.chat import render
    from ..core.constrained import isolation, limits

    values = {setting: getattr(args, flag.replace("-", "_")) for flag, (setting, _, _) in _ISOLATION_FLAGS.items()}
    for flag, (setting, _, _) in _ISOLATION_FLAGS.items():
        try:
            for cls, apply in ((limits.ConstraintLimits, limits.set_limits),
                               (render.TemplateLimits, render.set_limits),
                               (isolation.Settings, isolation.configure)):
                if setting in cls.__dataclass_fields__:
                    apply(**{setting: values[setting]})
        except ValueError as e:
            raise ValueError(f"--{flag}: {e}") from None


def _env(name: str, default: object) -> object:
    """The default of flag --name: PYLLAMA90A_NAME when set, else `default` (converted like the flag)."""
    return os.environ.get(ENV + name.upper().replace("-", "_"), default)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m pyllama90a.server",
        description="OpenAI-compatible server with continuous batching. Every flag also reads PYLLAMA90A_<FLAG> "
                    "(e.g. PYLLAMA90A_CTK=q4_0, PYLLAMA90A_API_KEY=...); a flag given wins.")
    p.add_argument("--model", default=_env("model", None), help="GGUF path (default: the default model, pulled once)")
    p.add_argument("--model-name", default=_env("model-name", None), help="id in /v1/models (default: file name)")
    p.add_argument("--ctk", default=_env("ctk", "q8_0"), choices=KV_TYPES, help="K cache type (default q8_0)")
    p.add_argument("--ctv", default=_env("ctv", "q8_0"), choices=KV_TYPES, help="V cache type (default q8_0)")
    p.add_argument("--flash-attn", default=_env("flash-attn", "auto"), choices=list(FLASH_ATTN_MODES))
    p.add_argument("--n-ctx", type=int, default=_env("n-ctx", 8192), help="KV cells in all, split among slots")
    p.add_argument("--parallel", type=int, default=_env("parallel", 4), help="slots decoded together (default 4)")
    p.add_argument("--n-batch", type=int, default=_env("n-batch", 512), help="most tokens per decode step")
    p.add_argument("--cache-ram", type=int, default=_env("cache-ram", 0), metavar="MIB",
                   help="a host-RAM prompt cache of this many MiB: the KV cells a request drops from its slot are "
                        "kept there, and a later prompt with their prefix restores them instead of decoding "
                        "(default 0: none)")
    p.add_argument("--context-shift", action=argparse.BooleanOptionalAction,
                   default=str(_env("context-shift", "")).lower() in ("1", "true", "yes"),
                   help="llama-server's: when a slot's cells fill, keep the request's first n_keep tokens, drop half "
                        "of the rest and go on generating (default off: the generation ends, finish_reason length)")
    p.add_argument("--n-gpu-layers", type=int, default=_env("n-gpu-layers", -1), help="-1: all")
    p.add_argument("--split-mode", default=_env("split-mode", "layer"), choices=["none", "layer", "row"],
                   help="how the offloaded layers are spread over the devices (default layer)")
    p.add_argument("--tensor-split", default=_env("tensor-split", None),
                   type=lambda v: [float(x) for x in v.split(",")],
                   help="comma-separated share per device, e.g. 3,1 (default: by free memory)")
    p.add_argument("--main-gpu", type=int, default=_env("main-gpu", 0), help="device index for --split-mode none")
    p.add_argument("--rpc", default=_env("rpc", None), type=lambda v: v.split(","),
                   help="comma-separated host:port of pyllama90a.worker processes whose devices join the split")
    p.add_argument("--lora", action="append", type=lora_flag, metavar="PATH[:SCALE]",
                   help="a LoRA adapter GGUF for the model, with its default scale (default 1.0); repeat for more "
                        "(ids 0, 1, ... in that order: GET /lora-adapters). PYLLAMA90A_LORA: comma-separated")
    p.add_argument("--threads", type=int, default=_env("threads", None), help="CPU threads (default: cores)")
    p.add_argument("--queue-size", type=int, default=_env("queue-size", 64),
                   help="requests that may wait for a slot; more get 429 (default 64)")
    p.add_argument("--pool-queue-size", type=int, default=_env("pool-queue-size", DEFAULT_QUEUE),
                   help="requests of one kind of work (parsing, generation submit, embeddings, tokenizer and "
                        "template, slot files) that may wait for that kind's worker threads; more get 429 with "
                        f"Retry-After, and /health names the saturated kinds (default {DEFAULT_QUEUE})")
    p.add_argument("--reranking", "--rerank", action="store_true",
                   default=str(_env("reranking", "")).lower() in ("1", "true", "yes"),
                   help="llama-server's flag: refuse to start unless the model is a reranker (a GGUF with rank "
                        "pooling). /v1/rerank is served on a reranker with or without it")
    p.add_argument("--pooling", choices=("none", "mean", "cls", "last", "rank"), default=_env("pooling", None),
                   help="llama-server's flag: how embeddings pool. They pool as the GGUF says (else mean); the "
                        "server refuses to start when this asks for another (none, a vector per token, is not "
                        "served)")
    p.add_argument("--chat-template-file", default=_env("chat-template-file", None),
                   help="a Jinja chat template (UTF-8 text) used instead of the GGUF's")
    p.add_argument("--reasoning-format", choices=("none", "deepseek", "auto"),
                   default=_env("reasoning-format", "auto"),
                   help="where a reasoning model's thinking block goes: none (left in the content), deepseek "
                        "(message.reasoning_content), auto (deepseek where the template declares thinking markers; "
                        "default auto); a request's reasoning_format wins")
    p.add_argument("--reasoning-budget", type=int, default=_env("reasoning-budget", -1),
                   help="tokens of thinking before its end marker is forced: -1 no limit (default), 0 at once")
    p.add_argument("--reasoning-budget-message", default=_env("reasoning-budget-message", ""),
                   help="text forced before the end of thinking when the budget is spent (default: none)")
    p.add_argument("--reasoning", choices=("on", "off", "auto"), default=_env("reasoning", "auto"),
                   help="the template variable enable_thinking: off sets it false, on and auto true (default "
                        "auto); a request's chat_template_kwargs wins")
    p.add_argument("--slot-save-path", default=_env("slot-save-path", None),
                   help="a folder for slot files (POST /slots/{id}?action=save|restore|erase); none: those are 501")
    p.add_argument("--slot-secret-file", default=_env("slot-secret-file", None),
                   help="a file (mode 600, 16 bytes or more) whose bytes are the secret that authenticates slot "
                        "files (HMAC-SHA256): a file without its MAC is refused (default: $PYLLAMA90A_HOME/"
                        "slot-secret, made once with 32 random bytes); never inside --slot-save-path")
    p.add_argument("--slot-max-files", type=int, default=_env("slot-max-files", DEFAULT_MAX_FILES),
                   help=f"files the slot folder may hold; a save past it is a 409 (default {DEFAULT_MAX_FILES})")
    p.add_argument("--slot-max-bytes", type=byte_size, default=_env("slot-max-bytes", DEFAULT_MAX_BYTES),
                   help="bytes the slot folder's files may take, e.g. 512M or 4G; a save past it is a 409 "
                        f"(default {DEFAULT_MAX_BYTES >> 30}G)")
    p.add_argument("--host", default=_env("host", "127.0.0.1"),
                   help="address to bind (default 127.0.0.1); several, comma-separated, as llama-server's")
    p.add_argument("--port", type=int, default=_env("port", 8000))
    p.add_argument("--api-key", default=_env("api-key", None),
                   help="require 'Authorization: Bearer <key>' or 'X-Api-Key: <key>' on every route but /health "
                        "and /openapi.json (and /metrics with --metrics-public)")
    p.add_argument("--metrics-public", action="store_true",
                   default=str(_env("metrics-public", "")).lower() in ("1", "true", "yes"),
                   help="answer /metrics without the API key (default: it needs the key, as llama-server's does)")
    for name, what in (("slots", "GET /slots"), ("metrics", "GET /metrics")):  # (llama-server's switches)
        p.add_argument(f"--{name}", action=argparse.BooleanOptionalAction,
                       default=str(_env(name, "1")).lower() in ("1", "true", "yes"),
                       help=f"serve {what} (default on; off: 501, as llama-server answers without --{name})")
    p.add_argument("--cors-origins", default=_env("cors-origins", ""),
                   help="comma-separated origins whose web pages may call this server (CORS): '*' for any, "
                        "'localhost' for pages served from this machine (any port), or origins such as "
                        "https://app.example.com; preflights are answered before the API key check "
                        "(default: none, no CORS headers)")
    p.add_argument("--cors-methods", default=_env("cors-methods", "GET, POST, OPTIONS"),
                   help="llama-server's: comma-separated methods a page may use (default GET, POST, OPTIONS)")
    p.add_argument("--cors-headers", default=_env("cors-headers", "*"),
                   help="llama-server's: comma-separated request headers a page may send (default *)")
    p.add_argument("--cors-credentials", action=argparse.BooleanOptionalAction,
                   default=str(_env("cors-credentials", "")).lower() in ("1", "true", "yes"),
                   help="llama-server's: let pages send credentials (cookies); with --cors-origins '*' the page's "
                        "origin is then echoed (default off here, on in llama-server: this server's key is a header)")
    p.add_argument("-a", "--alias", default=_env("alias", ""),
                   help="llama-server's: comma-separated names the model answers to in /v1/models and a request's "
                        "model; the alphabetically first is its id, as llama-server's (unless --model-name)")
    p.add_argument("--tags", default=_env("tags", ""),
                   help="llama-server's: comma-separated tags shown in /v1/models (informational)")
    p.add_argument("--seed", type=int, default=_env("seed", -1),
                   help="llama-server's: the seed of a request that sets none (default -1: a random one each)")
    p.add_argument("--temp", type=float, default=_env("temp", None),
                   help="llama-server's: the temperature of a request that sets none (default: the API's, 1.0)")
    p.add_argument("--max-tokens-default", type=int, default=_env("max-tokens-default", Limits.max_tokens_default),
                   help="max_tokens of a chat request that gives none (completions: OpenAI's 16) (default 1024)")
    p.add_argument("--max-tokens-limit", type=int, default=_env("max-tokens-limit", Limits.max_tokens_limit),
                   help="the largest max_tokens / max_completion_tokens a request may ask; more is a 400 "
                        "(default 32768; a generation also ends when its slot is full)")
    p.add_argument("--max-request-bytes", type=int, default=_env("max-request-bytes", Limits.max_request_bytes),
                   help="largest request body; more is a 413 (default 16 MiB)")
    p.add_argument("--unknown-fields", default=_env("unknown-fields", Limits.unknown_fields),
                   choices=UNKNOWN_FIELDS_MODES,
                   help="request fields this server does not know (a typo, another server's extension): 'warn' "
                        "serves the request, names them in an X-Ignored-Fields response header and logs a warning; "
                        "'reject' answers 400 naming them (default warn). Fields that would change the answer but "
                        "are not implemented get a 400 either way; ones that change nothing (user, metadata, ...) "
                        "are accepted")
    p.add_argument("--responses-store", type=int, default=_env("responses-store", DEFAULT_STORED_RESPONSES),
                   help="responses /v1/responses keeps in memory for previous_response_id, the least recently "
                        f"used forgotten first (default {DEFAULT_STORED_RESPONSES}; 0: none)")
    p.add_argument("--shutdown-grace", type=float, default=_env("shutdown-grace", 10.0),
                   help="seconds running requests get to finish after SIGTERM/SIGINT; then each remaining one "
                        "ends with an error (streams: an error event and [DONE]) (default 10)")
    p.add_argument("--header-timeout", type=float, default=_env("header-timeout", 10.0),
                   help="seconds a client has to send a request's headers, from connecting or from the last "
                        "response on its connection; then the connection is closed (slowloris) (default 10)")
    defaults = _isolation_settings()
    for flag, (setting, kind, text) in _ISOLATION_FLAGS.items():
        p.add_argument(f"--{flag}", type=kind, default=_env(flag, defaults[setting]),
                       help=f"{text} (default {defaults[setting]})")
    p.add_argument("--spec-type", default=_env("spec-type", "none"), choices=list(SPEC_TYPES),
                   help="speculative decoding: ngram-simple drafts by prompt lookup, draft-simple with --model-draft "
                        "(default none; draft-simple when --model-draft is given)")
    p.add_argument("--spec-draft-n-max", "--draft-max", "--draft", type=int, default=_env("spec-draft-n-max", 16),
                   help="most tokens per draft (default 16)")
    p.add_argument("--spec-draft-n-min", "--draft-min", type=int, default=_env("spec-draft-n-min", 0),
                   help="fewest tokens per draft; a shorter one is not tried (default 0)")
    p.add_argument("--spec-ngram-simple-size-n", type=int, default=_env("spec-ngram-simple-size-n", 3),
                   help="n-gram looked up for ngram-simple drafts (default 3)")
    p.add_argument("--model-draft", "-md", "--spec-draft-model", default=_env("model-draft", None), metavar="PATH",
                   help="draft model GGUF for speculative decoding, with the model's vocabulary (default: none)")
    p.add_argument("--spec-draft-threads", "-td", "--threads-draft", type=int, default=_env("spec-draft-threads", None),
                   help="the draft model's CPU threads (default: --threads)")
    p.add_argument("--spec-draft-type-k", "-ctkd", "--cache-type-k-draft", default=_env("spec-draft-type-k", "f16"),
                   choices=KV_TYPES, help="the draft model's K cache type (default f16)")
    p.add_argument("--spec-draft-type-v", "-ctvd", "--cache-type-v-draft", default=_env("spec-draft-type-v", "f16"),
                   choices=KV_TYPES, help="the draft model's V cache type (default f16)")
    p.add_argument("--spec-draft-ngl", "-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", type=int,
                   default=_env("spec-draft-ngl", -1), help="the draft model's layers offloaded (default -1: all)")
    p.add_argument("--log-level", default=_env("log-level", "warning"),
                   choices=["critical", "error", "warning", "info", "debug"], help="uvicorn's log level")
    args = p.parse_args(argv)  # argparse converts a string default (from the environment) with the flag's type
    if args.lora is None:  # (an appended flag takes no default from the environment)
        try:
            args.lora = [lora_flag(spec) for spec in str(_env("lora", "")).split(",") if spec]
        except argparse.ArgumentTypeError as e:
            p.error(f"{ENV}LORA: {e}")
    # a default taken from the environment is not checked by argparse: check every flag with choices here (None:
    # a flag not given whose default is none, --pooling's)
    for action in p._actions:
        value = getattr(args, action.dest, None)
        if action.choices is not None and value is not None and value not in action.choices:
            p.error(f"{action.option_strings[-1]} must be one of {', '.join(action.choices)}, got {value!r}")
    for name in ("max_tokens_default", "max_tokens_limit", "max_request_bytes"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.max_tokens_limit > 2**31 - 1:  # the engine's max_tokens is an int32
        p.error(f"--max-tokens-limit must be at most {2**31 - 1}, got {args.max_tokens_limit}")
    if args.max_tokens_default > args.max_tokens_limit:
        p.error(f"--max-tokens-default ({args.max_tokens_default}) is above --max-tokens-limit "
                f"({args.max_tokens_limit})")
    if not 0 <= args.cache_ram <= 1 << 30:  # (llama-server's -1, no limit, is refused: the cache is bounded)
        p.error(f"--cache-ram must be between 0 (no prompt cache) and {1 << 30} MiB, got {args.cache_ram}")
    if args.pool_queue_size < 0:
        p.error(f"--pool-queue-size must be at least 0, got {args.pool_queue_size}")
    if args.responses_store < 0:
        p.error(f"--responses-store must be at least 0, got {args.responses_store}")
    if not 0 < args.header_timeout <= 3600:  # also refuses nan
        p.error(f"--header-timeout must be above 0 and at most 3600 seconds, got {args.header_timeout}")
    if not 0 <= args.shutdown_grace <= 3600:  # also refuses nan
        p.error(f"--shutdown-grace must be between 0 and 3600 seconds, got {args.shutdown_grace}")
    if args.slot_save_path is not None and not os.path.isdir(args.slot_save_path):
        p.error(f"--slot-save-path {args.slot_save_path!r} is not a folder")
    try:
        apply_isolation_flags(args)
        args.cors_origins = cors_origins(args.cors_origins)
        args.alias, args.tags = _names(args.alias), _names(args.tags)
    except ValueError as e:
        p.error(str(e))
    if args.temp is not None and not 0.0 <= args.temp <= 2.0:  # (also refuses nan)
        p.error(f"--temp must be between 0 and 2, got {args.temp}")
    if not -(2**63) <= args.seed < 2**64:
        p.error(f"--seed must be a 64-bit integer, got {args.seed}")
    try:
        args.cors_methods, args.cors_headers = _names(args.cors_methods), _names(args.cors_headers)
    except ValueError as e:
        p.error(str(e))
    return args


def lora_flag(text: str) -> tuple[str, float]:
    """--lora PATH[:SCALE] as (path, scale); a path holding ':' takes a scale after its last one."""
    path, sep, scale = text.rpartition(":")
    try:
        value = float(scale)
    except ValueError:  # (no scale: a colon, if any, is the path's)
        return text, 1.0
    if not (sep and path):
        return text, 1.0
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"the scale of --lora {text!r} must be a finite number")
    return path, value


def cors_origins(text: str) -> tuple[str, ...]:
    """--cors-origins "a, b" as ("a", "b"); ValueError for one that no browser sends (an Origin header is
    scheme://host[:port], matched exactly)."""
    origins = tuple(o.strip() for o in text.split(",") if o.strip())
    for origin in origins:
        if origin not in ("*", "localhost") and not re.fullmatch(r"https?://[^/\s]+", origin):
            raise ValueError(f"--cors-origins: {origin!r} is not '*', 'localhost' or an origin such as "
                             f"https://app.example.com (scheme and host, no path)")
    return origins


def _names(text: str) -> tuple[str, ...]:
    """A comma-separated flag's names, blanks left out; ValueError for one named twice."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if len(set(names)) != len(names):
        raise ValueError(f"{text!r} names one twice")
    return names


def listeners(hosts: list[str], port: int) -> list[socket.socket]:
    """A listening socket on each of several --host addresses (uvicorn binds one host itself); IPv6 ones only
    IPv6, so that '0.0.0.0,::' binds both. Raises OSError naming the address that could not be bound."""
    bound: list[socket.socket] = []
    try:
        for host in hosts:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            bound.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind((host, port))
            except OSError as e:
                raise OSError(f"--host {host!r}, port {port}: {e.strerror or e}") from e
            sock.listen(2048)
    except BaseException:
        for sock in bound:
            sock.close()
        raise
    return bound


def whole_slots(n_ctx: int, parallel: int) -> int:
    """n_ctx, raised where it gives the slots fewer cells each than llama.cpp's smallest stream (256): llama.cpp
    pads every sequence's cells up to that (as llama-server's -c 512 -np 4 gets 4 slots of 256), and Model
    refuses a share it would pad silently."""
    from ..native.context import MIN_CELLS_PER_SEQUENCE

    padded = -(-n_ctx // MIN_CELLS_PER_SEQUENCE) * MIN_CELLS_PER_SEQUENCE
    if parallel > 1 and n_ctx >= 1 and padded // parallel < MIN_CELLS_PER_SEQUENCE:
        return MIN_CELLS_PER_SEQUENCE * parallel
    return n_ctx


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import uvicorn
    except ImportError:
        print("the server needs FastAPI and uvicorn: pip install 'pyllama90a[server]'", file=sys.stderr)
        return 2
    from ..core.chat import reasoning
    from ..core.chat.template import ChatTemplate
    from ..core.constrained import isolation
    from ..core.engine.engine import BatchEngine
    from ..core.generation.speculative import Speculation
    from ..core.model.rerank import is_reranker, pooling_name
    from ..errors import InvalidArgumentError, LlamaError
    from .app import ServerState, create_app
    from .header_timeout import protocol_with_header_timeout
    from .shutdown import GracefulServer
    from .state import CorsFlags

    hosts = [h.strip().removeprefix("[").removesuffix("]") for h in args.host.split(",")]
    try:  # (several addresses: bound here, before the model loads; one: by uvicorn, as before)
        sockets = listeners(hosts, args.port) if len(hosts) > 1 else []
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    n_ctx = whole_slots(args.n_ctx, args.parallel)
    if n_ctx != args.n_ctx:
        print(f"pyllama90a server: --n-ctx {args.n_ctx} gives {args.parallel} slots fewer than 256 cells each, "
              f"llama.cpp's smallest: using n_ctx {n_ctx} ({args.parallel} slots x 256)", flush=True)
        args.n_ctx = n_ctx
    try:
        if args.reasoning_budget < -1:
            raise ValueError(f"--reasoning-budget must be -1 (no limit) or a number of tokens, got "
                             f"{args.reasoning_budget}")
        reasoning.set_defaults(format=args.reasoning_format, budget_message=args.reasoning_budget_message,
                               budget=None if args.reasoning_budget == -1 else args.reasoning_budget,
                               enable_thinking=args.reasoning != "off")
    except (ValueError, InvalidArgumentError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        template = ChatTemplate.from_file(args.chat_template_file).source if args.chat_template_file else None

        spec_type = "draft-simple" if args.model_draft and args.spec_type == "none" else args.spec_type
        speculative = None if spec_type == "none" else Speculation(
            spec_type, args.spec_draft_n_max, args.spec_draft_n_min, args.spec_ngram_simple_size_n,
            draft=args.model_draft, draft_threads=args.spec_draft_threads, draft_ctk=args.spec_draft_type_k,
            draft_ctv=args.spec_draft_type_v, draft_n_gpu_layers=args.spec_draft_ngl)

        def make_engine() -> BatchEngine:  # at start-up, and again when lost RPC workers are back
            return BatchEngine(args.model, ctk=args.ctk, ctv=args.ctv, flash_attn=args.flash_attn, n_ctx=args.n_ctx,
                               parallel=args.parallel, n_batch=args.n_batch, n_gpu_layers=args.n_gpu_layers,
                               n_threads=args.threads, queue_size=args.queue_size, chat_template=template,
                               split_mode=args.split_mode, tensor_split=args.tensor_split, main_gpu=args.main_gpu,
                               rpc=args.rpc or (), lora=args.lora, cache_ram_bytes=args.cache_ram << 20,
                               speculative=speculative, context_shift=args.context_shift)

        engine = make_engine()
    except (LlamaError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    name = args.model_name or (min(args.alias) if args.alias else Path(engine.model.path).name)
    if args.reranking and not is_reranker(engine.model.handle):
        engine.close()
        print(f"error: --reranking: {name} is not a reranker (its GGUF's pooling type is not rank); use a reranker "
              "GGUF such as bge-reranker-v2-m3 or Qwen3-Reranker", file=sys.stderr)
        return 1
    if args.pooling is not None and args.pooling != (pooling := pooling_name(engine.model.handle)):
        engine.close()
        print(f"error: --pooling {args.pooling}: {name}'s embeddings pool by {pooling} here (the GGUF's pooling "
              f"type, else mean); {'a vector per token' if args.pooling == 'none' else 'another pooling'} is not "
              "served", file=sys.stderr)
        return 1
    state = ServerState(engine, name, api_key=args.api_key or None, cors_origins=args.cors_origins,
                        cors=CorsFlags(args.cors_methods, args.cors_headers, args.cors_credentials),
                        model_aliases=args.alias, model_tags=args.tags,
                        limits=Limits(args.max_tokens_default, args.max_tokens_limit, args.max_request_bytes,
                                      args.unknown_fields, seed=None if args.seed == -1 else args.seed,
                                      temperature=args.temp), reopen=make_engine if args.rpc else None,
                        slot_folder=slot_folder_of(args), executors=Executors(args.pool_queue_size),
                        metrics_public=args.metrics_public, response_store=ResponseStore(args.responses_store),
                        slots_served=args.slots, metrics_served=args.metrics)
    kv, att = state.kv_cache, engine.model.attention  # (the KV cache's facts as ServerState read them)
    print(f"pyllama90a server: {name}\n"
          f"  KV cache: K {kv.type_k} {kv.k_bytes / 2**20:.1f} MiB + V {kv.type_v} {kv.v_bytes / 2**20:.1f} MiB, "
          f"{args.parallel} slots x {engine.n_ctx_slot} tokens\n"
          f"  attention: flash_attn={att.flash_attn} on {att.backend} ({att.reason})\n"
          "  listening on " + ", ".join(f"http://{'[' + h + ']' if ':' in h else h}:{args.port}/v1" for h in hosts)
          + ("  (API key required)" if state.api_key else ""),
          flush=True)
    # the server's own warnings (unknown request fields) go where uvicorn's go, at the same --log-level
    log_config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    log_config["loggers"]["pyllama90a.server"] = {"handlers": ["default"], "level": args.log_level.upper(),
                                                  "propagate": False}
    config = uvicorn.Config(create_app(state), host=hosts[0], port=args.port, log_level=args.log_level,
                            log_config=log_config, http=protocol_with_header_timeout(args.header_timeout))
    try:
        # returns after Ctrl-C or SIGTERM
        GracefulServer(config, state, args.shutdown_grace).run(sockets=sockets or None)
    finally:
        state.workers.close()
        state.executors.shutdown()  # (work still waiting is dropped: its requests are gone)
        state.engine.close()  # (the one loaded again, if workers came back)
        isolation.shutdown()
        if state.embedder is not None:
            state.embedder.close()
        print("pyllama90a server: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
