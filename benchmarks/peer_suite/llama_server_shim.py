"""Started by llama.cpp's server test harness in place of llama-server (LLAMA_SERVER_BIN_PATH points at a
script that runs this): llama-server's flags translated to `python -m pyllama90a.server`'s, the model the
suite would download replaced by the default model (no network here). A flag with no counterpart here is
dropped and named on stderr, so a failure it causes can be classified."""
from __future__ import annotations

import os
import sys

# llama-server flag -> this server's (same value)
SAME_VALUE = {"--port": "--port", "--host": "--host", "--temp": "--temp", "--seed": "--seed", "--alias": "--alias",
              "--tags": "--tags", "--cors-origins": "--cors-origins", "--batch-size": "--n-batch",
              "--threads": "--threads", "--ctx-size": "--n-ctx", "--parallel": "--parallel", "-ctk": "--ctk",
              "-ctv": "--ctv", "-fa": "--flash-attn", "--n-predict": "--max-tokens-default",
              "--slot-save-path": "--slot-save-path", "--lora": "--lora", "--api-key": "--api-key",
              "--chat-template-file": "--chat-template-file", "--cache-ram": "--cache-ram",
              "--reasoning-format": "--reasoning-format", "--reasoning": "--reasoning",
              "--reasoning-budget": "--reasoning-budget", "--spec-type": "--spec-type",
              "--spec-draft-n-max": "--spec-draft-n-max", "--spec-draft-n-min": "--spec-draft-n-min",
              "--pooling": "--pooling"}
# flags with a value that the default model or this server decides itself
DROPPED_WITH_VALUE = {"--model", "--hf-repo", "--hf-file", "--model-url", "--ubatch-size", "--n-gpu-layers"}
# switches this server takes as they are (without --metrics llama-server answers /metrics 501)
SAME_SWITCHES = {"--context-shift", "--no-context-shift", "--slots", "--no-slots", "--metrics"}
# switches that are this server's behaviour anyway (embeddings, metrics, slots and Jinja are always served)
SWITCHES_SERVED = {"--cont-batching", "--embedding", "--jinja", "--no-ui", "--kv-unified"}


def translate(argv: list[str], model: str) -> tuple[list[str], list[str]]:
    """(this server's flags, llama-server's flags dropped)."""
    out, dropped = ["--model", model], []
    stood_in = {"--model-draft": model}  # (the suite's draft model: the default model drafts for itself)
    i = 0
    while i < len(argv):
        flag = argv[i]
        value = argv[i + 1] if i + 1 < len(argv) else None
        if flag in SAME_VALUE and value is not None:
            if flag == "-fa":
                value = {"on": "on", "off": "off", "auto": "auto"}.get(value, value)
            if flag == "--n-predict" and value == "-1":  # (llama-server's -1: until the slot is full)
                from pyllama90a.server.protocol.base import Limits
                value = str(Limits.max_tokens_limit)
            out += [SAME_VALUE[flag], value]
            i += 2
        elif flag in stood_in and value is not None:
            out += [flag, stood_in[flag]]
            i += 2
        elif flag in DROPPED_WITH_VALUE:
            i += 2
        elif flag in SWITCHES_SERVED:
            i += 1
        elif flag in SAME_SWITCHES:
            out.append(flag)
            i += 1
        else:  # (a value that follows an unknown flag is dropped with it)
            takes_value = value is not None and not value.startswith("-")
            dropped += [flag, value] if takes_value else [flag]
            i += 2 if takes_value else 1
    if "--metrics" not in argv:
        out.append("--no-metrics")
    return out, [d for d in dropped if d is not None]


def main() -> None:
    args, dropped = translate(sys.argv[1:], os.environ["PEER_SUITE_MODEL"])
    if dropped:
        print(f"peer-suite shim: dropped llama-server flags: {' '.join(dropped)}", file=sys.stderr, flush=True)
    os.execv(sys.executable, [sys.executable, "-m", "pyllama90a.server", *args])


if __name__ == "__main__":
    main()
