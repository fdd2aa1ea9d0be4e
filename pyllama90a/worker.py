"""`python -m pyllama90a.worker`: serve this machine's devices to other pyllama90a processes over ggml-rpc.

    python -m pyllama90a.worker --host 127.0.0.1 --port 50052 [--device CUDA0] [--threads N] [--cache DIR]

then, elsewhere, `Model(path, rpc=["host:50052"])` (or the server's --rpc): the model's layers are split over
the workers' devices and this machine's. The worker is ggml's RPC server from this build, so it runs the
patched kernels (the quantized-V product, the grouped K^T q). It serves one client at a time, and frees what a
client allocated when its connection closes.

The protocol has no authentication and no encryption: whoever reaches the port can run computations on the
worker and read what it holds. It binds 127.0.0.1 unless told otherwise; run it on a private network, or keep
it on 127.0.0.1 and reach it through an SSH tunnel (`ssh -N -L 50052:127.0.0.1:50052 worker-host`).
"""
from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import signal
import sys

from ._log import set_native_log_level
from .errors import InvalidArgumentError
from .model_open import default_threads
from .native.devices import device_name, serving_devices
from .native.rpc import ServerLimits, protocol_version, serve
from .placement import parse_endpoint

DEFAULT_PORT = 50052  # llama.cpp's rpc-server's


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyllama90a.worker", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1", help="IPv4 address to listen on (default 127.0.0.1: this "
                        "machine only; the protocol has no authentication)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    parser.add_argument("--device", action="append", default=[], help="a device to serve, by ggml's name (e.g. "
                        "CUDA0, CPU; repeatable; default: the GPUs, else the CPU)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: the physical cores)")
    parser.add_argument("--cache", default=None, metavar="DIR", help="keep large tensors a client sends in DIR, "
                        "so the next load of the same model sends only their hashes")
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
    threads = args.threads if args.threads is not None else default_threads()
    if threads < 1:
        parser.error(f"--threads must be at least 1, got {threads}")
    if not host.is_loopback:
        print(f"pyllama90a.worker: WARNING: listening on {endpoint}, reachable from other machines. ggml-rpc has "
              "no authentication or encryption: anyone who can connect can use this worker and read what it holds. "
              "Run it on a private network, or bind 127.0.0.1 and use an SSH tunnel.", file=sys.stderr, flush=True)
    cache = os.fsencode(os.path.abspath(args.cache)) if args.cache else None
    if cache:
        os.makedirs(cache, exist_ok=True)
    major, minor, patch = protocol_version()
    print(f"pyllama90a.worker: serving {', '.join(device_name(d) for d in devices)} on {endpoint} "
          f"(ggml-rpc {major}.{minor}.{patch}, {threads} threads)", file=sys.stderr, flush=True)
    # the refusals of what a client sent (patch 0022) are ggml warnings and errors: show them
    logging.basicConfig(stream=sys.stderr, format="pyllama90a.worker: %(message)s")
    set_native_log_level("WARNING")
    # ggml's server loop never returns to Python, so Python's Ctrl-C handler would never run: let SIGINT end it
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    serve(endpoint, devices, threads, cache, limits)
    print(f"pyllama90a.worker: could not serve on {endpoint} (see above)", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
