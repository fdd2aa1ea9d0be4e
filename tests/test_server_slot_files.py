"""llama-server's POST /slots/{id}?action=save|restore|erase (server/slot_files.py): a slot's cells to a file of
--slot-save-path and back, with llama-server's answer fields; bad names, actions, slots and files refused; 501
without --slot-save-path."""
from __future__ import annotations

import httpx
import pytest

from pyllama90a.tools.server_process import ServerProcess

pytestmark = pytest.mark.server

PROMPT = "The capital of France is"
ARGS = ["--parallel", "2", "--n-ctx", "1024", "--threads", "2", "--ctk", "q4_0", "--ctv", "q4_0", "--flash-attn", "off"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("slots")


@pytest.fixture(scope="module")
def http(model_path, folder):
    with (ServerProcess(["--model", str(model_path), *ARGS, "--slot-save-path", str(folder)]) as srv,
          httpx.Client(base_url=srv.base_url, timeout=120) as client):
        yield client


def _cached(http) -> list[int]:
    return [s["n_cached"] for s in http.get("/slots").json()]


def test_save_erase_restore(http, folder):
    done = http.post("/completion", json={"prompt": PROMPT, "n_predict": 8, "temperature": 0})
    assert done.status_code == 200, done.text
    slot = next(i for i, n in enumerate(_cached(http)) if n)
    n_cached = _cached(http)[slot]
    saved = http.post(f"/slots/{slot}?action=save", json={"filename": "paris.bin"}).json()
    assert (saved["id_slot"], saved["filename"], saved["n_saved"]) == (slot, "paris.bin", n_cached)
    assert saved["n_written"] > 0 and "save_ms" in saved["timings"] and (folder / "paris.bin").is_file()
    assert http.post(f"/slots/{slot}?action=erase").json() == {"id_slot": slot, "n_erased": n_cached}
    assert _cached(http)[slot] == 0
    restored = http.post(f"/slots/{slot}?action=restore", json={"filename": "paris.bin"}).json()
    assert restored["n_restored"] == n_cached and restored["n_read"] == saved["n_written"]
    assert _cached(http)[slot] == n_cached
    again = http.post("/completion", json={"prompt": PROMPT, "n_predict": 8, "temperature": 0}).json()
    assert again["content"] == done.json()["content"]


@pytest.mark.parametrize("url,body,status,param", [
    ("/slots/0?action=save", {"filename": "../escape.bin"}, 400, "filename"),
    ("/slots/0?action=save", {"filename": ".hidden"}, 400, "filename"),
    ("/slots/0?action=save", {}, 400, "filename"),
    ("/slots/0?action=restore", {"filename": "missing.bin"}, 400, "filename"),
    ("/slots/0?action=shred", {"filename": "a.bin"}, 400, "action"),
    ("/slots/9?action=erase", None, 400, "id_slot"),
    ("/slots/x?action=erase", None, 400, "id_slot"),
    ("/slots/%C2%B2?action=erase", None, 400, "id_slot"),  # "²": a digit to str.isdigit, not to int()
    ("/slots/%D9%A1?action=erase", None, 400, "id_slot"),  # U+0661, an Arabic-Indic 1, which int() takes
    ("/slots/" + "9" * 4301 + "?action=erase", None, 400, "id_slot"),  # more digits than int() converts
])
def test_bad_slot_actions_are_a_400(http, folder, url, body, status, param):
    reply = http.post(url, json=body) if body is not None else http.post(url)
    assert reply.status_code == status, reply.text
    assert reply.json()["error"]["param"] == param
    assert not (folder.parent / "escape.bin").exists()


def test_without_a_slot_save_path_the_actions_are_501(model_path):
    with ServerProcess(["--model", str(model_path), *ARGS]) as srv:
        reply = httpx.post(srv.base_url + "/slots/0?action=erase", timeout=60)
    assert reply.status_code == 501 and reply.json()["error"]["code"] == "not_supported"
