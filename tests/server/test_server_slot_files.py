"""llama-server's POST /slots/{id}?action=save|restore|erase (server/slot_files.py): a slot's cells to a file of
--slot-save-path and back, with llama-server's answer fields; bad names, actions, slots and files refused; 501
without --slot-save-path. Files are authenticated with the server's secret and the folder has a quota (issue 33,
items 11-14)."""
from __future__ import annotations

import hashlib
import os
import shutil
import stat

import httpx
import pytest

from pyllama90a.server.slot_policy import byte_size, kept_secret, read_secret, slot_folder
from pyllama90a.tools.server_process import ServerProcess

pytestmark = pytest.mark.server

PROMPT = "The capital of France is"
ARGS = ["--parallel", "2", "--n-ctx", "1024", "--threads", "2", "--ctk", "q4_0", "--ctv", "q4_0", "--flash-attn", "off"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("slots")


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """The server's $PYLLAMA90A_HOME: where it keeps the slot secret it makes."""
    return tmp_path_factory.mktemp("home")


@pytest.fixture(scope="module")
def http(model_path, folder, home):
    with (ServerProcess(["--model", str(model_path), *ARGS, "--slot-save-path", str(folder)],
                        env={"PYLLAMA90A_HOME": str(home)}) as srv,
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


def _saved(http, name: str) -> int:
    """Save the slot that holds PROMPT's cells (generated first) as `name`; its id."""
    assert http.post("/completion", json={"prompt": PROMPT, "n_predict": 8, "temperature": 0}).status_code == 200
    slot = next(i for i, n in enumerate(_cached(http)) if n)
    saved = http.post(f"/slots/{slot}?action=save", json={"filename": name})
    assert saved.status_code == 200, saved.text
    return slot


def test_the_server_keeps_a_secret_readable_by_its_owner_only(http, home):
    _saved(http, "kept.bin")
    secret = home / "slot-secret"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and len(read_secret(secret)) == 64


def test_a_forged_file_is_a_400_and_restores_nothing(http, folder):
    # issue 33, item 13: a file whose token list was rewritten and its checksum made again restored, and the slot
    # answered another prompt from the first prompt's cells. Files carry an HMAC under the server's secret now
    slot = _saved(http, "honest.bin")
    data = bytearray((folder / "honest.bin").read_bytes())
    n_tokens = int.from_bytes(data[68:72], "little")
    other = http.post("/tokenize", json={"content": "My favourite colour is"}).json()["tokens"]
    at = 80 + 36
    data[at:at + 4 * len(other)] = b"".join(t.to_bytes(4, "little") for t in other)
    assert len(other) <= n_tokens
    for version, name in ((3, "forged3.bin"), (4, "forged4.bin")):  # a version 3 checksum; a version 4 "MAC"
        data[8:12] = version.to_bytes(4, "little")
        body = bytes(data[:-32])
        (folder / name).write_bytes(body + hashlib.sha256(body).digest())
        reply = http.post(f"/slots/{slot}?action=restore", json={"filename": name})
        assert reply.status_code == 400 and reply.json()["error"]["code"] == "bad_state_file", reply.text
        assert reply.json()["error"]["message"].startswith(f"{name}: ")
    assert http.post(f"/slots/{slot}?action=restore", json={"filename": "honest.bin"}).status_code == 200


def test_links_and_other_files_in_the_folder_are_a_400_naming_the_file_alone(http, folder):
    # issue 33, item 12: a link to /proc/self/mem was a 500; messages printed the server's folder and, through a
    # link, the first bytes of any file the server could read
    (folder / "passwd").write_bytes(b"root:x:0:0:root:/root:/bin/bash\n" * 10)
    for target in ("/proc/self/mem", "/etc/passwd", str(folder / "passwd")):
        link = folder / "link.bin"
        link.unlink(missing_ok=True)
        link.symlink_to(target)
        for name in ("link.bin", "passwd", "missing.bin"):
            reply = http.post("/slots/0?action=restore", json={"filename": name})
            assert reply.status_code == 400, reply.text
            message = reply.json()["error"]["message"]
            assert message.startswith(f"{name}: ") and str(folder) not in message and "root:x" not in message
    (folder / "passwd").unlink()
    (folder / "link.bin").unlink()


def test_saves_past_the_quota_are_a_409(model_path, http, folder, tmp_path):
    # issue 33, item 14: 300 saves from one client wrote 127 MB in 1.3 s. The folder holds at most
    # --slot-max-files files and --slot-max-bytes bytes; a save past either is refused before it writes
    _saved(http, "size.bin")
    size = (folder / "size.bin").stat().st_size
    quota_folder, secret = tmp_path / "slots", tmp_path / "secret"
    quota_folder.mkdir()
    secret.write_bytes(os.urandom(32))
    secret.chmod(0o600)
    args = ["--model", str(model_path), *ARGS, "--slot-save-path", str(quota_folder), "--slot-secret-file",
            str(secret), "--slot-max-files", "2", "--slot-max-bytes", str(size * 3 // 2)]
    with (ServerProcess(args) as srv, httpx.Client(base_url=srv.base_url, timeout=120) as client):
        slot = _saved(client, "a.bin")
        steps = (("b.bin", "--slot-max-bytes"), ("a.bin", None), ("planted", None), ("b.bin", "--slot-max-files"))
        for name, flag in steps:
            if name == "planted":
                (quota_folder / name).write_bytes(b"x")
                continue
            reply = client.post(f"/slots/{slot}?action=save", json={"filename": name})
            if flag is None:
                assert reply.status_code == 200, reply.text  # saving over a file replaces it: no more room taken
            else:
                assert reply.status_code == 409 and flag in reply.json()["error"]["message"], reply.text
                assert reply.json()["error"]["code"] == "slot_quota_exceeded"
        assert sorted(os.listdir(quota_folder)) == ["a.bin", "planted"]  # nothing else written, no temporary file
        shutil.copy(folder / "size.bin", quota_folder / "other-secret.bin")  # another server's file: not ours
        reply = client.post(f"/slots/{slot}?action=restore", json={"filename": "other-secret.bin"})
        assert reply.status_code == 400 and "authentication failed" in reply.json()["error"]["message"]
        assert client.post(f"/slots/{slot}?action=restore", json={"filename": "a.bin"}).status_code == 200


def test_the_secret_is_kept_once_and_checked(tmp_path):
    made = kept_secret(tmp_path / "home" / "slot-secret")
    assert kept_secret(tmp_path / "home" / "slot-secret") == made  # the same after a restart
    assert stat.S_IMODE((tmp_path / "home" / "slot-secret").stat().st_mode) == 0o600
    loose = tmp_path / "loose"
    loose.write_bytes(b"x" * 32)
    loose.chmod(0o644)
    with pytest.raises(ValueError, match="chmod 600"):
        read_secret(loose)
    loose.chmod(0o600)
    loose.write_bytes(b"short\n")
    with pytest.raises(ValueError, match="must hold 16 to 4096 bytes"):
        read_secret(loose)
    (tmp_path / "slots").mkdir()
    with pytest.raises(ValueError, match="must not be inside --slot-save-path"):
        slot_folder(str(tmp_path / "slots"), str(tmp_path / "slots" / "secret"), 1, 1)
    assert (byte_size("4G"), byte_size("512M"), byte_size("65536"), byte_size("1k")) == (4 << 30, 512 << 20, 65536,
                                                                                         1024)
    with pytest.raises(ValueError, match="not a size"):
        byte_size("-1")
