"""llama-server's slot routes: GET /slots (each slot and whether it is generating) and POST
/slots/{id}?action=save|restore|erase: a slot's KV cells in a file of --slot-save-path and back
(BatchEngine.save_slot / restore_slot / erase_slot, core/engine/slot_files.py's format and checks).

save and restore take {"filename": NAME}: a plain file name in that folder (letters, digits, '.', '_', '-', not
starting with '.'), never a path. Without --slot-save-path the route answers 501, as llama-server does. Files
are authenticated with the server's secret (slot_policy.py): a file without its MAC is a 400. A save that would
take the folder past --slot-max-files or --slot-max-bytes is a 409 (slot_quota_exceeded), checked on the
engine thread, where every slot action runs one at a time, so two saves cannot both take the last room.
"""
from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from ...errors import StateFileError
from ..errors import APIError
from ..protocol import openapi as doc
from ..protocol.body import read_json
from ..slot_policy import SlotFolder, folder_usage
from .family import Family, State

router = Family()

ACTIONS = ("save", "restore", "erase")
_FILENAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")
_SLOT_ID = re.compile(r"[0-9]{1,9}")


def _filename(body: Any) -> str:
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object with a filename")
    name = body.get("filename")
    if not isinstance(name, str) or not _FILENAME.fullmatch(name):
        raise APIError(400, "filename must be a plain file name of --slot-save-path (letters, digits, '.', '_', "
                            "'-', at most 128, not starting with '.')", param="filename")
    return name


def quota(folder: SlotFolder, name: str) -> Callable[[int], None]:
    """The `admit` of a save to `name`: refuses a file that would take the folder past its quota (the file it
    replaces does not count)."""
    def admit(file_bytes: int) -> None:
        try:
            files, used = folder_usage(folder.path, name)
        except OSError as e:
            raise StateFileError(f"the slot folder cannot be read: {e.strerror}") from None
        if files + 1 > folder.max_files:
            raise APIError(409, f"the slot folder holds {files} files, its quota (--slot-max-files); erase some or "
                                f"save over one", code="slot_quota_exceeded", param="filename")
        if used + file_bytes > folder.max_bytes:
            raise APIError(409, f"this slot file takes {file_bytes} bytes and the slot folder's files {used} of its "
                                f"{folder.max_bytes} (--slot-max-bytes)", code="slot_quota_exceeded",
                           param="filename")
    return admit


@router.serve("GET", "/slots", doc=doc.fixed(
    "The slots and whether each is generating (fail_on_no_slot=1: 503 when none is free)",
    {200: doc.json_body("one entry per slot", doc.SLOTS), **doc.errors(400, 401, 501, 503)}))
async def slots(request: Request, state: State) -> list[dict[str, Any]]:
    if not state.slots_served:
        raise APIError(501, "GET /slots is off on this server (--no-slots)", type="not_supported_error")
    engine = state.engine
    fail_on_no_slot = request.query_params.get("fail_on_no_slot", "0")
    if fail_on_no_slot not in ("0", "1"):
        raise APIError(400, "'fail_on_no_slot' must be 0 or 1", param="fail_on_no_slot")
    usage = engine.slot_usage()
    if fail_on_no_slot == "1" and all(busy for busy, _ in usage):
        raise APIError(503, "no slot is free", type="unavailable_error", code="no_slot_available")
    speculative = engine.speculative is not None  # (llama-server's: the slot drafts, by n-gram or model)
    return [{"id": i, "id_task": -1, "n_ctx": engine.n_ctx_slot, "speculative": speculative, "is_processing": busy,
             "n_cached": n_cached} for i, (busy, n_cached) in enumerate(usage)]


@router.serve("POST", "/slots/{id_slot}", doc=doc.fixed(
    "llama-server's slot files: ?action=save|restore (body {filename}, a plain name in --slot-save-path) or erase; "
    "the slot must be idle", {200: doc.json_body("what was saved, restored or erased", doc.SLOT_ACTION),
                              **doc.errors(400, 401, 409, 413, 429, 501, 503)}, doc.SLOT_FILE_BODY))
async def slot_action(request: Request, id_slot: str, state: State) -> JSONResponse:
    folder = state.slot_folder
    if folder is None:
        raise APIError(501, "slot files need the server started with --slot-save-path DIR", type="not_supported_error",
                       code="not_supported")
    action = request.query_params.get("action")
    if action not in ACTIONS:
        raise APIError(400, f"action must be one of {', '.join(ACTIONS)}", param="action")
    engine = state.engine
    # ASCII digits only, few enough for int(): str.isdigit takes "²" (which int() refuses) and U+0661 (an
    # Arabic-Indic 1, which int() takes)
    if not _SLOT_ID.fullmatch(id_slot) or int(id_slot) >= engine.parallel:
        raise APIError(400, f"id_slot must be 0 to {engine.parallel - 1}", param="id_slot")
    slot, pool = int(id_slot), state.executors.slot_files
    if action == "erase":
        return JSONResponse({"id_slot": slot, "n_erased": await pool.run(engine.erase_slot, slot)})
    name = _filename(await read_json(request, state.limits.max_request_bytes, pool))
    path = folder.path / name
    start = time.perf_counter()
    if action == "save":
        n_tokens, n_bytes = await pool.run(engine.save_slot, slot, path, key=folder.key, admit=quota(folder, name))
        ms = (time.perf_counter() - start) * 1e3
        return JSONResponse({"id_slot": slot, "filename": name, "n_saved": n_tokens, "n_written": n_bytes,
                             "timings": {"save_ms": ms}})
    n_tokens, n_bytes = await pool.run(engine.restore_slot, slot, path, key=folder.key)
    ms = (time.perf_counter() - start) * 1e3
    return JSONResponse({"id_slot": slot, "filename": name, "n_restored": n_tokens, "n_read": n_bytes,
                         "timings": {"restore_ms": ms}})
