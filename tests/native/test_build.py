"""vendor/prepare_source.py: where the llama.cpp source comes from, and how it fails."""
from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

PREPARE = Path(__file__).resolve().parents[2] / "vendor" / "prepare_source.py"


def _prepare(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYLLAMA90A_CACHE": str(tmp_path / "cache"), **env}
    return subprocess.run([sys.executable, str(PREPARE)], capture_output=True, text=True, env=full, timeout=600)


class _UnavailableIndex(http.server.BaseHTTPRequestHandler):
    """A package index on loopback that answers every request with 503, and counts them."""
    requests: list[str]

    def do_GET(self) -> None:
        self.requests.append(self.path)
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_unreachable_index_fails_after_one_retry_with_instructions(tmp_path) -> None:
    """An unreachable index costs one retry, not pip's default five with backoff (how the fetch stays fast
    offline: counted, not timed), and the error says how to provide the source instead."""
    handler = type("Index", (_UnavailableIndex,), {"requests": []})
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as index:
        threading.Thread(target=index.serve_forever, daemon=True).start()
        try:
            out = _prepare(tmp_path, PIP_CONFIG_FILE=os.devnull, PIP_FIND_LINKS="", PIP_EXTRA_INDEX_URL="",
                           PIP_INDEX_URL=f"http://127.0.0.1:{index.server_port}/simple")
        finally:
            index.shutdown()
    assert out.returncode == 1
    assert 1 <= len(handler.requests) <= 2, handler.requests  # asked the index, and retried at most once
    assert "could not fetch the llama.cpp source" in out.stderr
    assert "PYLLAMA90A_LLAMA_CPP_SRC" in out.stderr
    assert "Traceback" not in out.stderr


def test_wrong_sdist_is_refused(tmp_path) -> None:
    fake = tmp_path / "llama_cpp_python-0.3.36.tar.gz"
    fake.write_bytes(b"not the real thing")
    out = _prepare(tmp_path, PYLLAMA90A_LLAMA_CPP_SRC=str(fake))
    assert out.returncode == 1
    assert "has sha256" in out.stderr and "refusing" in out.stderr


def test_missing_local_source(tmp_path) -> None:
    out = _prepare(tmp_path, PYLLAMA90A_LLAMA_CPP_SRC=str(tmp_path / "nowhere"))
    assert out.returncode == 1 and "does not exist" in out.stderr


def test_a_patch_that_does_not_apply_is_named(tmp_path) -> None:
    # the tree the build prepared is already patched: patching it again must fail, by name
    prepared = subprocess.run([sys.executable, str(PREPARE)], capture_output=True, text=True, timeout=600)
    if prepared.returncode != 0:
        pytest.skip("no prepared llama.cpp source in the default cache")
    out = _prepare(tmp_path, PYLLAMA90A_LLAMA_CPP_SRC=prepared.stdout.strip())
    assert out.returncode == 1
    assert "0001-pyllama90a-api-and-attention-hooks.patch does not apply" in out.stderr


def test_prepared_tree_carries_our_patches() -> None:
    out = subprocess.run([sys.executable, str(PREPARE)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    tree = Path(out.stdout.strip())
    assert "llama_kv_cache_bytes" in (tree / "include" / "llama-pyllama90a.h").read_text()
    assert "llama_kv_cache_bytes" not in (tree / "include" / "llama.h").read_text()  # llama.h stays upstream's
    assert "quantized V cache requires flash_attn" not in (tree / "src" / "llama-context.cpp").read_text()
