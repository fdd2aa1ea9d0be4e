"""`python -m pyllama90a.bench [server|batched|constrained|quality|prompt-cache|speculative] ...`: the one entry
point of the benchmarks; without a subcommand, prefill and decode speed per attention mode at chosen depths
(depths.py)."""
from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    commands = ("server", "batched", "constrained", "quality", "prompt-cache", "speculative")
    command = argv[0] if argv[:1] and argv[0] in commands else None
    if command == "server":
        from .server import main as run
    elif command == "batched":
        from .batched import main as run
    elif command == "constrained":
        from .constrained import main as run
    elif command == "quality":
        from .quality import main as run
    elif command == "prompt-cache":
        from .prompt_cache import main as run
    elif command == "speculative":
        from .speculative import main as run
    else:
        from .depths import main as run
        return run(argv)
    return run(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
