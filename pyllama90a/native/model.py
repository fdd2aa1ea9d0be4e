"""ModelHandle: one loaded llama_model, and the calls that read it without a context (vocabulary, metadata,
llama.cpp's built-in chat templates)."""
from __future__ import annotations

import os
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import (
    INT32_MAX,
    DecodeError,
    InvalidArgumentError,
    LlamaError,
    ModelLoadError,
    UnsupportedChatTemplateError,
    flag,
    fs_path,
    int_in_range,
    utf8,
)
from . import rpc
from ._ffi import ffi, lib
from .devices import device_label, local_offload_devices
from .log import NativeCall

if TYPE_CHECKING:  # pragma: no cover
    from .._native import CData  # (only in the stub, _native.pyi)
    from .placement import Placement

MAX_TOKENIZE_BYTES = 64 << 20  # of UTF-8 text per llama_tokenize call (well within its int32 lengths)
LLAMA_TOKEN_NULL = -1  # what llama_vocab_bos/eos return for a vocabulary without that token
# the fill-in-the-middle tokens llama.cpp reads from a GGUF (tokenizer.ggml.fim_<kind>_token_id, or found by their
# text): prefix, suffix, middle, padding, repository name, file separator
FIM_KINDS = ("pre", "suf", "mid", "pad", "rep", "sep")


class ModelHandle:
    """The weights of one GGUF file, loaded once; any number of ContextHandles run on them.

    No close(): the weights are freed by a finalizer when the last reference is gone, and every ContextHandle
    made from this handle holds one, so they are never freed under a context (the Models that share them drop
    theirs on close()). Every call here only reads the model: any thread may make them at any time.
    """

    def __init__(self, path: str | bytes | os.PathLike[str] | os.PathLike[bytes], *, n_gpu_layers: int = -1,
                 weight_repack: bool = True, placement: Placement | None = None, simulate: bool = False) -> None:
        """weight_repack: weights on the CPU may go to its extra buffer types (AMX tiles, repacked layouts for
        faster mat-muls), as llama.cpp does by default; False keeps them in plain CPU buffers. placement: the
        devices the offloaded layers go to (None: llama.cpp's defaults). simulate: load the metadata only and
        simulate every allocation, this handle's and its contexts' (their sizes are true; nothing can decode)."""
        raw_path = fs_path("path", path)
        int_in_range("n_gpu_layers", n_gpu_layers, -1, INT32_MAX)  # -1: all layers
        self.path = Path(os.fsdecode(raw_path))
        params = lib.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        params.use_extra_bufts = flag("weight_repack", weight_repack)
        params.no_alloc = self.simulated = flag("simulate", simulate)
        if simulate:  # (as llama.cpp's own memory fit does: nothing is mapped, the file's data is never read)
            params.load_mode = lib.LLAMA_LOAD_MODE_NONE
        self.workers: tuple[rpc.Endpoint, ...] = placement.rpc if placement is not None else ()
        keep = _place(params, placement)  # (the arrays params points to, alive through the load)
        self.devices: tuple[str, ...] = keep.labels
        with NativeCall() as call:
            ptr = lib.llama_model_load_from_file(raw_path, params)
        if ptr == ffi.NULL:  # (the reason is looked up only on failure)
            call.fail(ModelLoadError, f"llama.cpp could not load {self.path}{_load_reason(call.lines)}")
        weakref.finalize(self, lib.llama_model_free, ptr)
        # the connections the weights went over: a worker is lost to this model once its connection is another
        self._connections = {w: rpc.connection(w) for w in self.workers}
        lost = ", ".join(map(str, self.lost_workers()))
        if lost:  # a worker went away while the weights were sent
            call.fail(ModelLoadError, f"lost the connection to RPC worker {lost} while loading {self.path}")
        self.ptr = ptr  # the llama_model*, for ContextHandle; valid as long as this handle is referenced
        self._vocab = lib.llama_model_get_vocab(ptr)
        self.n_vocab: int = lib.llama_vocab_n_tokens(self._vocab)
        self.n_embd: int = lib.llama_model_n_embd(ptr)
        # query heads a KV head shares (GQA; 1 where the model reports no KV heads, as an embedding model may)
        self.gqa: int = lib.llama_model_n_head(ptr) // max(lib.llama_model_n_head_kv(ptr), 1) or 1
        self.n_ctx_train: int = lib.llama_model_n_ctx_train(ptr)
        self.weights_bytes: int = lib.llama_model_size(ptr)  # of all its tensors, wherever they are
        bos, eos = lib.llama_vocab_bos(self._vocab), lib.llama_vocab_eos(self._vocab)
        self.bos: int | None = bos if 0 <= bos < self.n_vocab else None  # None: the vocabulary has none
        self.eos: int | None = eos if 0 <= eos < self.n_vocab else None
        self.add_bos: bool = bool(lib.llama_vocab_get_add_bos(self._vocab))  # whether tokenize(add_special) adds BOS
        # a reranker's prompt without a rerank template: [BOS] query [EOS] [SEP] document [EOS], as these say
        sep = lib.llama_vocab_sep(self._vocab)
        self.sep: int | None = sep if 0 <= sep < self.n_vocab else None
        self.add_eos: bool = bool(lib.llama_vocab_get_add_eos(self._vocab))
        self.add_sep: bool = bool(lib.llama_vocab_get_add_sep(self._vocab))
        self.n_cls_out: int = lib.llama_model_n_cls_out(ptr)  # a classifier head's outputs (a reranker's scores)
        fim = {kind: getattr(lib, f"llama_vocab_fim_{kind}")(self._vocab) for kind in FIM_KINDS}
        # kind -> token id, None where the vocabulary has none (pyllama90a.core.model.fim builds infill prompts of them)
        self.fim: dict[str, int | None] = {k: t if 0 <= t < self.n_vocab else None for k, t in fim.items()}

    def lost_workers(self) -> tuple[rpc.Endpoint, ...]:
        """The workers of this model whose connection was lost (its layers there are gone)."""
        # (a worker this model holds no connection to, 0, has none of its layers: nothing to lose)
        return tuple(w for w, own in self._connections.items() if own < 0 or (own > 0 and rpc.connection(w) != own))

    def check_workers(self, ctx: CData, call: NativeCall) -> None:  # ctx: a llama_context* on this model
        """After a decode on `ctx`: DecodeError (with `call`'s lines) when a worker holding some of this model's
        layers was lost. ggml-rpc fetches outputs asynchronously, so this waits for the decode to finish: a
        connection lost after llama_decode returned would otherwise show only as zeros in the logits."""
        if not self.workers:
            return
        lib.llama_synchronize(ctx)
        lost = ", ".join(map(str, self.lost_workers()))
        if lost:
            call.fail(DecodeError, f"lost the connection to RPC worker {lost} (it stopped, or the network failed); "
                                   "the layers it held are gone with it: close this model and load it again once "
                                   "the worker is back")

    # -- tokens ----------------------------------------------------------------------------------------------

    def tokenize(self, data: bytes, add_special: bool, parse_special: bool) -> list[int]:
        """The tokens of UTF-8 `data`; add_special adds BOS/EOS as the model wants, parse_special reads control
        tokens' text (e.g. "<|im_end|>") as those tokens."""
        # llama.cpp copies and splits the text and we give it a token buffer of 4 bytes per byte: 390 MB of text
        # under a 3 GB address-space limit ended the process (std::bad_alloc thrown across the C API)
        if len(data) > MAX_TOKENIZE_BYTES:
            raise InvalidArgumentError(f"text has {len(data)} bytes; one tokenization takes at most "
                                       f"{MAX_TOKENIZE_BYTES} ({MAX_TOKENIZE_BYTES >> 20} MiB)")
        cap = len(data) + 8
        buf = ffi.new("llama_token[]", cap)
        with NativeCall() as call:
            n = lib.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
            if n < 0:  # never seen for cap > bytes, but llama.cpp tells the size needed
                cap = -n
                buf = ffi.new("llama_token[]", cap)
                n = lib.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        call.check(n >= 0, LlamaError, "tokenization failed")
        return list(ffi.unpack(buf, n))

    def token_piece(self, token: int, special: bool = False) -> bytes:
        """The bytes of one token; special=True renders control tokens too (else they are empty)."""
        if not 0 <= token < self.n_vocab:  # llama.cpp would throw across the C API: the process would end
            raise InvalidArgumentError(f"token {token} is not in this model's vocabulary [0, {self.n_vocab})")
        buf = ffi.new("char[]", 64)
        n = lib.llama_token_to_piece(self._vocab, token, buf, 64, 0, special)
        if n < 0:  # the buffer was too small; -n is the size needed
            buf = ffi.new("char[]", -n)
            with NativeCall() as call:
                n = lib.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
            call.check(n >= 0, LlamaError, f"llama_token_to_piece failed for token {token}")
        return _unpacked(buf, n)

    def check_token_ids(self, tokens: object) -> list[int]:
        """`tokens` (a list, tuple or range of ints, not bools) as a list, every one an id of this vocabulary, in
        [0, n_vocab); else InvalidArgumentError. The one check of token ids a caller hands in."""
        if not isinstance(tokens, (list, tuple, range)):
            raise InvalidArgumentError(f"tokens must be a list of integers, got {type(tokens).__name__}")
        n_vocab = self.n_vocab
        if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < n_vocab for t in tokens):
            raise InvalidArgumentError(f"tokens must be integers in [0, {n_vocab})")
        return list(tokens)

    def detokenize(self, tokens: Iterable[int], special: bool = False) -> str:
        """The text of `tokens` (ids in [0, n_vocab), checked); special=True renders control tokens."""
        ids = self.check_token_ids(tokens)
        arr = ffi.new("llama_token[]", ids)
        cap = min(max(16, 8 * len(ids)), INT32_MAX)
        buf = ffi.new("char[]", cap)
        with NativeCall() as call:
            n = lib.llama_detokenize(self._vocab, arr, len(ids), buf, cap, False, special)
            if n < 0:  # -n is the size needed
                buf = ffi.new("char[]", -n)
                n = lib.llama_detokenize(self._vocab, arr, len(ids), buf, len(buf), False, special)
        call.check(n >= 0, LlamaError, "detokenization failed")
        return _unpacked(buf, n).decode("utf-8", "replace")

    def is_eog(self, token: int) -> bool:
        """Whether `token` ends a generation (EOS, EOT, ...)."""
        return lib.llama_vocab_is_eog(self._vocab, token)

    # -- metadata and templates --------------------------------------------------------------------------------

    def metadata(self, key: str) -> str | None:
        """The GGUF metadata value of `key` as text, or None when the model has no such key."""
        raw_key = utf8("key", key, nul_ok=False)
        buf = ffi.new("char[]", 4096)
        n = lib.llama_model_meta_val_str(self.ptr, raw_key, buf, len(buf))
        if n >= len(buf):  # snprintf-like: n is the whole value's length
            buf = ffi.new("char[]", n + 1)
            n = lib.llama_model_meta_val_str(self.ptr, raw_key, buf, len(buf))
        return None if n < 0 else _unpacked(buf, n).decode("utf-8", "replace")

    def builtin_chat_template(self, messages: Sequence[Mapping[str, Any]], name: str | None = None) -> str:
        """`messages` ({"role", "content"} strings) rendered by llama.cpp's built-in template `name` (None: the
        one it matches to the GGUF's template text), ready for the assistant's turn."""
        # the template gets NUL-terminated strings: a NUL would silently cut a message
        encoded = [(utf8(f"messages[{i}]['role']", m["role"], nul_ok=False),
                    utf8(f"messages[{i}]['content']", m["content"], nul_ok=False)) for i, m in enumerate(messages)]
        cap = 2 * sum(len(role) + len(content) for role, content in encoded) + 256
        if cap > INT32_MAX:  # the output buffer's length is an int32
            raise InvalidArgumentError(f"messages are too long for llama.cpp's chat template ({cap} bytes)",
                                       param="messages")
        keep = [(ffi.new("char[]", role), ffi.new("char[]", content)) for role, content in encoded]
        chat = ffi.new("llama_chat_message[]", len(keep))
        for i, (role, content) in enumerate(keep):
            chat[i].role, chat[i].content = role, content
        if name:
            tmpl = ffi.new("char[]", utf8("name", name, nul_ok=False))
        else:
            tmpl = lib.llama_model_chat_template(self.ptr, ffi.NULL)
            if tmpl == ffi.NULL:
                raise LlamaError(f"{self.path.name} has no chat template")
        for _ in range(2):
            buf = ffi.new("char[]", cap)
            with NativeCall() as call:
                n = lib.llama_chat_apply_template(tmpl, chat, len(keep), True, buf, cap)
            call.check(n >= 0, UnsupportedChatTemplateError,
                       f"llama.cpp does not support the chat template {name or self.path.name}")
            if n <= cap:
                return _unpacked(buf, n).decode("utf-8", "replace")
            cap = n
        raise LlamaError("chat template output kept growing")  # pragma: no cover

    def __repr__(self) -> str:
        return f"ModelHandle({str(self.path)!r}, n_vocab={self.n_vocab}, n_embd={self.n_embd})"


@dataclass
class _Placed:
    labels: tuple[str, ...]  # the devices the model's offloaded layers may go to, in llama.cpp's order
    arrays: tuple[CData, ...] = ()  # what llama_model_params points to


_SPLIT_MODES = {"none": "LLAMA_SPLIT_MODE_NONE", "layer": "LLAMA_SPLIT_MODE_LAYER", "row": "LLAMA_SPLIT_MODE_ROW"}


def _place(params: CData, placement: Placement | None) -> _Placed:  # params: llama_model_params
    """Fill `params`' device list (workers' devices first, as llama.cpp orders them), split mode, main GPU and
    shares from `placement`, checked against those devices."""
    local = local_offload_devices()
    if placement is None:
        return _Placed(tuple(device_label(d) for d in local))
    # workers are given to this model only: llama.cpp's own tools register them in ggml's device list, where
    # every later model of the process would use them too
    devices = [d for worker in placement.rpc for d in rpc.worker_devices(worker)] + local
    labels = tuple(device_label(d) for d in devices)
    if len(devices) > lib.llama_max_devices():
        raise InvalidArgumentError(f"llama.cpp takes at most {lib.llama_max_devices()} devices, the workers and "
                                   f"this machine have {len(devices)}", param="rpc")
    placement.check_devices(list(labels))
    params.split_mode = getattr(lib, _SPLIT_MODES[placement.split_mode])
    params.main_gpu = placement.main_gpu
    arrays = []
    if placement.rpc:
        arrays.append(ffi.new("ggml_backend_dev_t[]", [*devices, ffi.NULL]))
        params.devices = arrays[-1]
    if placement.tensor_split is not None:
        shares = list(placement.tensor_split)
        arrays.append(ffi.new("float[]", shares + [0.0] * (lib.llama_max_devices() - len(shares))))
        params.tensor_split = arrays[-1]
    return _Placed(labels, tuple(arrays))


def _unpacked(buf: CData, n: int) -> bytes:
    """The first `n` bytes of char array `buf`, NULs included (ffi.string would stop at the first one)."""
    data: bytes = ffi.unpack(buf, n)  # (the stub says Any: unpack gives a list for other arrays)
    return data


def _load_reason(lines: Iterable[str]) -> str:
    """': <why>' from llama.cpp's "error loading model: <why>" log line (the key and value a check refused), so
    the exception's first line says it; '' when it logged none."""
    marker = "error loading model: "
    for line in reversed(list(lines)):
        if marker in line:
            return ": " + line.split(marker, 1)[1]
    return ""
