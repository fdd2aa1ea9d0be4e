"""core/model/fim.py on real models: the FIM token ids llama.cpp reads from a GGUF's metadata, the infill prompt of
a model without FIM_REP and FIM_SEP (extra chunks after a "--- snippet ---" line), what a model lacking some FIM
tokens is refused with, and a generation from an infill prompt. Random-weight synthetic models
(pyllama90a.tools.synthetic); the expected prompts are assembled here from the vocabulary's known ids."""
from __future__ import annotations

import pytest

import pyllama90a as pl
from pyllama90a.core.model.fim import fim_tokens, infill_prompt
from pyllama90a.tools.synthetic import BOS_ID, FIM_TEXTS, fim_token_ids, synthetic_model

N_VOCAB = 512  # the tiny shape's


def _model(fim: tuple[str, ...]) -> pl.Model:
    return pl.Model(synthetic_model("tiny", fim=fim), n_ctx=256)


def test_the_ids_are_the_metadatas() -> None:
    every = tuple(FIM_TEXTS)
    with _model(every) as m:
        assert fim_tokens(m) == fim_token_ids(N_VOCAB, every) == {k: N_VOCAB - 6 + i for i, k in enumerate(every)}
        assert all(m.detokenize([t], special=True) == FIM_TEXTS[k] for k, t in fim_tokens(m).items())
    with _model(()) as m:
        assert fim_tokens(m) == dict.fromkeys(every)


def test_without_repository_tokens_chunks_follow_a_snippet_line() -> None:
    fim = fim_token_ids(N_VOCAB, ("pre", "suf", "mid"))
    with _model(("pre", "suf", "mid")) as m:
        def tok(text: str) -> list[int]:
            return m.tokenize(text, add_special=False)
        extra = [{"filename": "a.py", "text": "x = 1"}, {"text": "y = 2"}]
        got = infill_prompt(m, "def f(", "):\n", input_extra=extra, prompt="a")
        snippet = tok("\n\n--- snippet ---\n\n")
        assert snippet and got == [BOS_ID, *snippet, *tok("x = 1"), *snippet, *tok("y = 2"), fim["pre"],
                                   *tok("def f("), fim["suf"], *tok("):\n"), fim["mid"], *tok("a")]
        # a FIM token's text in the code is text, not the token
        assert infill_prompt(m, FIM_TEXTS["pre"], "").count(fim["pre"]) == 1
        # an infill prompt generates like any prompt
        completion = m.generate(got, max_tokens=4, temperature=0)
        assert completion.usage.prompt_tokens == len(got) and 1 <= completion.usage.completion_tokens <= 4


def test_a_model_lacking_a_fim_token_is_refused_naming_it() -> None:
    with _model(("pre", "suf", "rep", "sep")) as m, pytest.raises(pl.InfillUnsupportedError) as caught:
        infill_prompt(m, "a", "b")
    message = str(caught.value)
    assert "fim_mid" in message and "tokenizer.ggml.fim_mid_token_id" in message
    assert "fim_pre" not in message and "fim_suf" not in message
    assert isinstance(caught.value, pl.InvalidArgumentError) and caught.value.param is None


@pytest.mark.parametrize(("args", "extra", "param"), [
    ((1, "b"), {}, "input_prefix"),
    (("a", None), {}, "input_suffix"),
    (("a", "b"), {"prompt": 3}, "prompt"),
    (("a", "b"), {"input_extra": {"text": "x"}}, "input_extra"),
    (("a", "b"), {"input_extra": [["x"]]}, "input_extra[0]"),
    (("a", "b"), {"input_extra": [{"filename": "x"}]}, "input_extra[0].text"),
    (("a", "b"), {"input_extra": [{"text": "x", "filename": 1}]}, "input_extra[0].filename"),
    (("a\ud800", "b"), {}, "input_prefix"),  # a lone surrogate cannot be UTF-8: named too
])
def test_bad_arguments_name_the_field(args, extra, param) -> None:
    with _model(tuple(FIM_TEXTS)) as m, pytest.raises(pl.InvalidArgumentError) as caught:
        infill_prompt(m, *args, **extra)
    assert caught.value.param == param
