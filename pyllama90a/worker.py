"""`python -m pyllama90a.worker`: serve this machine's devices to other pyllama90a processes over ggml-rpc.

    python -m pyllama90a.worker --host 127.0.0.1 --port 50052 [--secret-file FILE] [--device CUDA0] [--threads N]

then, elsewhere, `Model(path, rpc=["host:50052"])` (or the server's --rpc): the model's layers are split over
the workers' devices and this machine's. The worker is ggml's RPC server from this build, so it runs the
patched kernels (the quantized-V product, the grouped K^T q). It serves one client at a time, and frees what a
client allocated when its connection closes.

What it guarantees (patches 0022, 0023): every command is checked before it runs (tensors inside their
buffers, an allow-list of ops with their shape rules, row indices, sizes, graph depth); a refused command
closes that connection (logged) and the worker serves the next client; new buffers are cleared, so no client
reads another's data. With --secret-file (the clients: PYLLAMA90A_RPC_SECRET_FILE naming a file with the same
secret) both ends prove they hold the secret (HMAC-SHA256 challenge-response) before any command.
What it does not: the link is not encrypted (anyone on the path reads the weights and activations, and could
alter them after the handshake): keep it on 127.0.0.1 and reach it through an SSH tunnel (`ssh -N -L
50052:127.0.0.1:50052 worker-host`) or run it on a WireGuard network. An authenticated client is trusted with
the worker's memory budget and time; the op checks follow ggml's rules and the CPU kernels, not a proof.
"""
from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import signal
import sys

from .core.model.open import default_threads
from .errors import InvalidArgumentError
from .native.devices import device_name, serving_devices
from .native.log import set_native_log_level
from .native.placement import parse_endpoint
from .native.rpc import SECRET_FILE_ENV, ServerLimits, protocol_version, read_secret, serve

DEFAULT_PORT = 50052  # llama.cpp's rpc-server's


def main(argv: list[str] | None = None) -> int:
    # ggml's server loop never returns to Python, so Python's Ctrl-C handler would never run: let SIGINT end the
    # process, from before its first line (a SIGINT after a line and before a later reset could be taken by
    # Python's handler as the call into the loop began, and never acted on: a test's SIGINT hung it, 2026-12-06)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    parser = argparse.ArgumentParser(prog="python -m pyllama90a.worker", description=__doc__.split("\n\n")[0],
                                     epilog="\n\n".join(__doc__.split("\n\n")[2:]),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1", help="IPv4 address to listen on (default 127.0.0.1: this "
                        "machine only). Another address needs --secret-file or --allow-unauthenticated")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    parser.add_argument("--device", action="append", default=[], help="a device to serve, by ggml's name (e.g. "
                        "CUDA0, CPU; repeatable; default: the GPUs, else the CPU)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: the physical cores)")
    parser.add_argument("--cache", default=None, metavar="DIR", help="keep large tensors a client sends in DIR, "
                        "so the next load of the same model sends only their hashes")
    parser.add_argument("--secret-file", default=os.environ.get(SECRET_FILE_ENV), metavar="FILE",
                        help="serve only clients that prove they hold the secret in FILE (at least 16 bytes, "
                        f"mode 600; default: ${SECRET_FILE_ENV}); clients read it from ${SECRET_FILE_ENV}")
    parser.add_argument("--allow-unauthenticated", action="store_true",
                        help="listen on an address other than loopback without --secret-file (anyone who reaches "
                        "the port can use the worker)")
    parser.add_argument("--cache-max-mib", type=int, default=ServerLimits.cache_max_bytes >> 20, metavar="MIB",
                        help="what --cache may hold (default %(default)s MiB); a tensor that would not fit is not "
                        "saved")
    parser.add_argument("--timeout", type=float, default=ServerLimits.timeout_s, metavar="S",
                        help="disconnect a client silent for S seconds during the handshake or inside a message "
                        "(default %(default)g)")
    parser.add_argument("--idle-timeout", type=float, default=ServerLimits.idle_timeout_s, metavar="S",
                        help="disconnect a client silent for S seconds between commands (default 0: never; a "
                        "loaded model keeps its connection open while it is idle)")
    args = parser.parse_args(argv)
    if args.cache_max_mib < 0 or not args.timeout > 0 or not args.idle_timeout >= 0:
        parser.error("--cache-max-mib and --idle-timeout must be >= 0, --timeout > 0")
    limits = ServerLimits(args.timeout, args.idle_timeout, args.cache_max_mib << 20)
    try:
        endpoint = parse_endpoint(f"{args.host}:{args.port}", "--host/--port")
        devices = serving_devices(args.device)
    except InvalidArgumentError as e:
        parser.error(str(e))
    try:
        host = ipaddress.IPv4Address(args.host)  # ggml's server binds an IPv4 address, not a name
    except ValueError:
        parser.error(f"--host must be an IPv4 address (ggml-rpc binds no names), got {args.host!r}")
    try:
        secret = read_secret(args.secret_file, "--secret-file") if args.secret_file else None
    except InvalidArgumentError as e:
        parser.error(str(e))
    threads = args.threads if args.threads is not None else default_threads()
    if threads < 1:
        parser.error(f"--threads must be at least 1, got {threads}")
    if not host.is_loopback and secret is None:
        if not args.allow_unauthenticated:
            parser.error(f"--host {args.host} is reachable from other machines: give --secret-file (or, knowingly, "
                         "--allow-unauthenticated)")
        print(f"pyllama90a.worker: WARNING: listening on {endpoint}, reachable from other machines, with no "
              "authentication (--allow-unauthenticated): anyone who can connect can use this worker. Give "
              "--secret-file, and carry the link over an SSH tunnel or WireGuard.", file=sys.stderr, flush=True)
    cache = os.fsencode(os.path.abspath(args.cache)) if args.cache else None
    if cache:
        os.makedirs(cache, exist_ok=True)
    major, minor, patch = protocol_version()
    print(f"pyllama90a.worker: serving {', '.join(device_name(d) for d in devices)} on {endpoint} "
          f"(ggml-rpc {major}.{minor}.{patch}, {threads} threads, "
          f"{'clients must hold the secret' if secret else 'no authentication'})", file=sys.stderr, flush=True)
    # the refusals of what a client sent (patch 0022) are ggml warnings and errors: show them
    logging.basicConfig(stream=sys.stderr, format="pyllama90a.worker: %(message)s")
    set_native_log_level("WARNING")
    serve(endpoint, devices, threads, cache, limits, secret)
    print(f"pyllama90a.worker: could not serve on {endpoint} (see above)", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
