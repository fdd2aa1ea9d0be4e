"""CK's fmha codegen (generate.py of the fetched CK), run the way the CK build runs it
(vendor/ck_fmha_codegen.py), yields the small instance set the dispatch needs and the sources CMake compiles."""
from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from support.ck_dispatch import parse_api, trait_parameters
from support.ck_tree import ck_root  # noqa: F401  (fixture)
from support.repo_scripts import script_module

codegen = script_module("ck_fmha_codegen")

KERNEL_NAME = re.compile(
    r"fmha_fwd_d(?P<hdim>\d+)_(?P<dtype>\w+?)_(?P<mode>batch|group)_b\w+?_"
    r"(?P<pipeline>qr_async|qr|qs)_v(?P<vlayout>[rc])_(?P<pad>npad|p[a-z]+)_(?P<logits>n?logits)_"
    r"(?P<bias>nbias|bias|alibi)_(?P<mask>n?mask)_(?P<lse>n?lse)_(?P<dropout>n?dropout)_(?P<skip>n?skip)_"
    r"(?P<squant>n?squant)\.cpp")


@pytest.fixture(scope="module")
def generated(ck_root: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    out = tmp_path_factory.mktemp("ck_fmha_gen")
    return out, codegen.generate(ck_root, out)


def kernels(sources: list[Path]) -> list[re.Match]:
    return [KERNEL_NAME.fullmatch(p.name) for p in sources if p.name != "fmha_fwd_api.cpp"]


def test_the_instance_set_is_fp16_batch_mode_head_dims_64_128(generated):
    _, sources = generated
    names = kernels(sources)
    assert all(names), [p.name for p, m in zip(sources, names, strict=True) if not m]
    assert {(m["dtype"], m["mode"], m["vlayout"], m["logits"], m["lse"], m["dropout"], m["skip"], m["squant"])
            for m in names} == {("fp16", "batch", "r", "nlogits", "nlse", "ndropout", "nskip", "nsquant")}
    combos = {(int(m["hdim"]), m["bias"], m["mask"]) for m in names}
    assert combos == set(itertools.product(codegen.HEAD_DIMS, ["nbias", "bias"], ["nmask", "mask"]))
    # each combination has a kernel that takes any sequence length (padding on q and k lengths):
    # ggml's n_kv is a multiple of 256 only by chance, n_q never needs to be one
    for combo in combos:
        pads = {m["pad"] for m in names if (int(m["hdim"]), m["bias"], m["mask"]) == combo}
        assert any(p.startswith("pssk") for p in pads), (combo, pads)
    assert len(names) == 16


def test_cmake_gets_exactly_the_written_sources(generated):
    out, sources = generated
    listed = [Path(line) for line in (out / codegen.LIST_FILE).read_text().split()]
    assert listed == sources and all(p.is_absolute() and p.is_file() for p in listed)
    assert sorted(p for p in out.iterdir() if p.suffix == ".cpp") == sources
    assert (out / "fmha_fwd_api.cpp") in sources


def test_every_kernel_source_specialises_fmha_fwd_for_a_trait_the_dispatcher_calls(generated):
    out, sources = generated
    normalise = lambda trait: re.sub(r"\s+", "", trait)  # noqa: E731
    dispatched = {i.trait for dt in parse_api((out / "fmha_fwd_api.cpp").read_text())
                  for hd in dt.head_dims for i in hd.instances}
    compiled = set()
    for source in sources:
        if source.name == "fmha_fwd_api.cpp":
            continue
        text = source.read_text()
        assert '#include "fmha_fwd.hpp"' in text
        assert "float fmha_fwd_<trait_0>(const ck_tile::stream_config& s, fmha_fwd_args a)" in text
        trait = re.search(r"using trait_0 = (fmha_fwd_traits_<.*?>);", text, re.S).group(1)
        mask = re.search(r"using fmha_mask_0 = (.*?);", text).group(1)  # the trait names its mask by alias
        compiled.add(normalise(trait.replace("fmha_mask_0", mask)))
    assert compiled == {normalise(t) for t in dispatched}
    assert len(dispatched) == len(compiled) == 16
    for trait in dispatched:
        params = trait_parameters(trait)
        assert params[1] == "FmhaFwdFp16" and params[2] == "false"  # fp16, batch mode
        assert params[9] == "true" and params[11] == "false"        # row-major V, no softcap
        assert params[14:17] == ["false"] * 3                        # no LSE, dropout, fp8 quant


def test_the_dispatcher_has_one_case_per_head_dim(generated):
    out, _ = generated
    cases = parse_api((out / "fmha_fwd_api.cpp").read_text())
    assert [c.condition for c in cases] == ['(t.data_type == "fp16")']
    assert [h.condition for h in cases[0].head_dims] == [
        f"t.hdim_q <= {d} and t.hdim_v <= {d}" for d in codegen.HEAD_DIMS]
