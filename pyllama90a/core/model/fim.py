"""Fill-in-the-middle (infill) prompts from a coder model's FIM tokens, in llama-server's /infill layout:

    [BOS]  [FIM_REP] myproject\\n  ([FIM_SEP] filename\\n text)...  [FIM_SEP] filename\\n
    [FIM_PRE] input_prefix [FIM_SUF] input_suffix [FIM_MID] prompt

    from pyllama90a.core.model.fim import infill_prompt
    tokens = infill_prompt(model, "def add(a, b):\\n    ", "\\n\\nprint(add(1, 2))\\n")
    text = model.generate(tokens, max_tokens=32).text       # the middle

The FIM tokens are the vocabulary's (llama.cpp reads them from the GGUF metadata, tokenizer.ggml.fim_*_token_id,
or finds them by their text); a model without the prefix, suffix or middle token cannot infill
(InfillUnsupportedError names what it lacks). The FIM_REP line comes where the model has FIM_REP, the FIM_SEP
lines where it has FIM_SEP, as in llama-server: "myproject" and the last "filename" are its placeholders, and a
chunk without a filename is "tmp"; without FIM_SEP each extra chunk's text follows a "--- snippet ---" line.

Every text is tokenized without BOS and with special-token text read as plain text (a FIM token's text in a
file being completed is not that token). Unlike llama-server, nothing is cut to fit a batch: a prompt too long
for the context is refused when it is submitted (ContextOverflowError). Where llama-server's code differs from
its documented layout, this follows the documentation: `prompt` comes after FIM_MID (its code appends it to the
prefix), and BOS, where the model adds one, starts the sequence (its code puts it after the extra context).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ...errors import InfillUnsupportedError, InvalidArgumentError, about
from ...native.model import FIM_KINDS

if TYPE_CHECKING:  # pragma: no cover
    from .model import Model

__all__ = ["FIM_KINDS", "REQUIRED_KINDS", "fim_tokens", "infill_prompt"]

REQUIRED_KINDS = ("pre", "suf", "mid")  # what any infill prompt needs
_ROLES = {"pre": "prefix", "suf": "suffix", "mid": "middle", "pad": "padding", "rep": "repository",
          "sep": "file separator"}
REPO_NAME = "myproject"      # llama-server's placeholders in the repository lines
FILE_NAME = "filename"
CHUNK_FILENAME = "tmp"       # an extra chunk's filename when it gives none
SNIPPET_SEPARATOR = "\n\n--- snippet ---\n\n"  # before each extra chunk of a model without FIM_SEP


def fim_tokens(model: Model) -> dict[str, int | None]:
    """The model's FIM token ids by kind (FIM_KINDS), None where its vocabulary has none."""
    return dict(model.handle.fim)


def _check_supported(model: Model) -> dict[str, int | None]:
    fim = fim_tokens(model)
    missing = [kind for kind in REQUIRED_KINDS if fim[kind] is None]
    if missing:
        lacks = ", ".join(f"fim_{k} (the FIM {_ROLES[k]} token, GGUF key tokenizer.ggml.fim_{k}_token_id)"
                          for k in missing)
        raise InfillUnsupportedError(f"this model cannot fill in the middle: its vocabulary has no {lacks}")
    return fim


def _text(value: object, param: str) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(f"'{param}' must be a string, got {type(value).__name__}", param=param)
    return value


def _extra_chunks(input_extra: object) -> list[tuple[str, str]]:
    """(filename, text) of each chunk: a mapping with a string "text" and, optionally, a string "filename"."""
    if not isinstance(input_extra, (list, tuple)):
        raise InvalidArgumentError("'input_extra' must be a list of {\"filename\": string, \"text\": string}",
                                   param="input_extra")
    chunks = []
    for i, chunk in enumerate(input_extra):
        where = f"input_extra[{i}]"
        if not isinstance(chunk, Mapping):
            raise InvalidArgumentError(f"'{where}' must be an object {{\"filename\": string, \"text\": string}}",
                                       param=where)
        if "text" not in chunk:
            raise InvalidArgumentError(f"'{where}.text' is required", param=f"{where}.text")
        text = _text(chunk["text"], f"{where}.text")
        filename = _text(chunk["filename"], f"{where}.filename") if "filename" in chunk else CHUNK_FILENAME
        chunks.append((filename, text))
    return chunks


def infill_prompt(model: Model, input_prefix: str, input_suffix: str, *,
                  input_extra: Sequence[Mapping[str, str]] = (), prompt: str = "") -> list[int]:
    """The tokens of an infill prompt: the text before the gap, the text after it, other files' chunks for
    context ({"filename", "text"}), and `prompt`, the start of the middle. Arguments are llama-server's /infill
    fields, and an InvalidArgumentError's `param` names the one at fault."""
    fim = _check_supported(model)
    prefix, suffix = _text(input_prefix, "input_prefix"), _text(input_suffix, "input_suffix")
    start = _text(prompt, "prompt")
    chunks = _extra_chunks(input_extra)

    def tokens(text: str, param: str) -> list[int]:
        with about(param):
            return model.tokenize(text, add_special=False, parse_special=False)

    handle = model.handle
    out: list[int] = [handle.bos] if handle.add_bos and handle.bos is not None else []
    rep, sep = fim["rep"], fim["sep"]
    if rep is not None:
        out += [rep, *tokens(REPO_NAME + "\n", "input_extra")]
    for i, (filename, text) in enumerate(chunks):
        if sep is not None:
            out += [sep, *tokens(filename + "\n", f"input_extra[{i}].filename")]
        else:
            out += tokens(SNIPPET_SEPARATOR, "input_extra")
        out += tokens(text, f"input_extra[{i}].text")
    if sep is not None:
        out += [sep, *tokens(FILE_NAME + "\n", "input_extra")]
    assert fim["pre"] is not None and fim["suf"] is not None and fim["mid"] is not None  # (_check_supported)
    out += [fim["pre"], *tokens(prefix, "input_prefix"), fim["suf"], *tokens(suffix, "input_suffix"), fim["mid"],
            *tokens(start, "prompt")]
    return out
