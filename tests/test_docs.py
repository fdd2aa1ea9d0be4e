"""The documentation: the MkDocs site of docs/ builds in strict mode with no warning, and every command README
shows runs (its set-up commands are .ci/run's, its quick starts run against the real model and a real server, and
each other `python -m pyllama90a...` command parses its arguments).

mkdocs comes with README's install (the `docs` extra): where it is missing, the build test fails, it does not skip.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pyllama90a.tools.server_process import ServerProcess

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CI_RUN = ROOT / ".ci" / "run"
# how README's quick starts reach the server they start (its default --host and --port)
README_URL = "http://127.0.0.1:8000"
# README's quick starts run as a user runs them in the repository root: this checkout's sources first
SOURCE_ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _readme_blocks() -> list[tuple[str, str, str]]:
    """README's fenced code blocks as (the `## ` section they are in, their language, their text)."""
    blocks: list[tuple[str, str, str]] = []
    section, language, lines = "", None, []
    for line in README.read_text().splitlines():
        if language is not None:
            if line.startswith("```"):
                blocks.append((section, language, "\n".join(lines) + "\n"))
                language, lines = None, []
            else:
                lines.append(line)
        elif line.startswith("```"):
            language = line[3:].strip()
        elif line.startswith("## "):
            section = line[3:].strip()
    assert language is None, "README ends inside a code block"
    return blocks


def _block(section: str, language: str, index: int = 0) -> str:
    found = [text for s, lang, text in _readme_blocks() if s == section and lang == language]
    assert len(found) > index, f"README has no {language} block number {index + 1} under '## {section}'"
    return found[index]


def _commands(shell_text: str) -> list[str]:
    """The command lines of a shell text: comments and blank lines left out, `\\` continuations joined."""
    joined = shell_text.replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    # the mkdocs of this environment (README's install puts it there), never one found on PATH
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site)], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.fast
def test_site_builds_in_strict_mode_with_no_warning(tmp_path: Path) -> None:
    out = _mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site")
    log = out.stdout + out.stderr
    assert out.returncode == 0 and "WARNING" not in log, log
    # the API reference is generated from the docstrings, not left empty
    reference = (tmp_path / "site" / "reference" / "index.html").read_text()
    for name in ("pyllama90a.Model.generate", "pyllama90a.BatchEngine.submit", "pyllama90a.errors.BusyError"):
        assert f'id="{name}"' in reference, f"the API reference has no entry {name}"


@pytest.mark.fast
def test_strict_build_fails_on_a_broken_link(tmp_path: Path) -> None:
    """The check above means something: the same configuration refuses a link to an anchor that does not exist."""
    docs = tmp_path / "docs"
    subprocess.run(["cp", "-r", str(ROOT / "docs"), str(docs)], check=True)
    with (docs / "index.md").open("a") as index:
        index.write("\n[broken](api.md#no-such-section)\n")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    config["docs_dir"] = str(docs)
    config["plugins"][1]["mkdocstrings"]["handlers"]["python"]["paths"] = [str(ROOT)]
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    out = _mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert out.returncode != 0 and "no-such-section" in out.stdout + out.stderr, out.stdout + out.stderr


@pytest.mark.fast
def test_readme_set_up_commands_are_what_ci_runs() -> None:
    readme = _commands(_block("Install", "bash"))
    ci = [line for line in _commands(CI_RUN.read_text())
          if line != "set -euo pipefail" and line != 'cd "$(dirname "$0")/.."']
    assert len(readme) == 2 and readme == ci, f"README:\n{readme}\n.ci/run:\n{ci}"


def _pyllama90a_commands() -> list[list[str]]:
    """Every `python -m pyllama90a...` command in README's shell blocks (also inside `a && b` chains)."""
    found = []
    for _, language, text in _readme_blocks():
        if language != "bash":
            continue
        for line in _commands(text):
            for part in line.split("&&"):
                words = shlex.split(part)
                if words[:2] == ["python", "-m"] and words[2].split(".")[0] == "pyllama90a":
                    found.append(words)
    return found


@pytest.mark.fast
def test_readme_module_commands_parse_their_arguments() -> None:
    commands = _pyllama90a_commands()
    modules = {words[2] for words in commands}
    assert {"pyllama90a", "pyllama90a.server"} <= modules, modules
    for words in commands:
        # argparse reads the arguments in order, so those before --help are checked (a wrong choice exits 2)
        out = subprocess.run([sys.executable, *words[1:], "--help"], cwd=ROOT, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0 and "usage:" in out.stdout, f"{shlex.join(words)} --help:\n{out.stderr}"


@pytest.mark.model
def test_readme_python_quick_start_runs(model_path: Path, tmp_path: Path) -> None:
    # (its `pl.default_model()` is the file the model_path fixture pulled)
    out = subprocess.run([sys.executable, "-c", _block("Quick start: Python", "python")], cwd=tmp_path,
                         env=SOURCE_ENV, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "Paris" in out.stdout and "q4_0" in out.stdout, out.stdout
    assert (tmp_path / "s.bin").is_file()


@pytest.mark.server
def test_readme_server_quick_start_runs(model_path: Path, tmp_path: Path) -> None:
    section = "Quick start: server"
    start = shlex.split(_commands(_block(section, "bash", 0))[0])
    assert start[:3] == ["python", "-m", "pyllama90a.server"], start
    from pyllama90a.server.__main__ import parse_args

    settings = parse_args(start[3:])
    assert f"http://{settings.host}:{settings.port}" == README_URL, "README's URL is not the server's default"
    curl = _block(section, "bash", 1)
    client = _block(section, "python")
    assert README_URL in curl and README_URL in client
    # README's flags as given; only the port is a free one (ServerProcess adds --port)
    with ServerProcess(start[3:], cwd=str(ROOT), env={"PYTHONPATH": str(ROOT)}, timeout=300) as srv:
        out = subprocess.run(["bash", "-c", curl.replace(README_URL, srv.base_url)], capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, out.stderr
        answer = json.loads(out.stdout)
        assert answer["choices"][0]["message"]["content"].strip(), answer
        out = subprocess.run([sys.executable, "-c", client.replace(README_URL, srv.base_url)], cwd=tmp_path,
                             env=SOURCE_ENV, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip(), "the openai client's answer is empty"


# folders of the repository whose files the docs name by path (src/, include/ and ggml/ paths in the docs are
# llama.cpp's, in the patched tree, not ours); `core/...`, `server/...`, `native/...` are the package's
REPO_FOLDERS = ("pyllama90a", "examples", "benchmarks", "vendor", "tests", "cmake", ".ci")
PACKAGE_FOLDERS = ("core", "server", "native")


def _docs_texts() -> dict[str, str]:
    """README and docs/*.md, their fenced code blocks left out (commands there name outputs as well as inputs)."""
    texts = {}
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        text = "\n".join(part for i, part in enumerate(page.read_text().split("```")) if i % 2 == 0)
        if page.name == "moved-paths.md":  # its table's first column names the old paths, gone by design
            text = re.sub(r"^\|[^|\n]*\|", "|", text, flags=re.M)
        texts[page.relative_to(ROOT).as_posix()] = text
    return texts


def _named_paths(span: str) -> list[str]:
    paths = []
    for match in re.finditer(r"(?<![\w./-])([\w.-]+/[\w./-]*)", span):
        path = match.group(1).rstrip(".")
        top = path.split("/")[0]
        if top in PACKAGE_FOLDERS:
            path = f"pyllama90a/{path}"
        elif top not in REPO_FOLDERS:
            continue
        if not re.search(r"[*<>{}]", span[match.start():match.end() + 1]):
            paths.append(path)
    return paths


def _module_exists(dotted: str) -> bool:
    """`pyllama90a.a.b` is a module or package of the source tree (the compiled `_native` by its stub), or a name
    (its last part) that one mentions: a module that moved fails, a name is checked only loosely."""
    def source(name: str) -> Path | None:
        base = ROOT.joinpath(*name.split("."))
        candidates = (base.with_suffix(".py"), base.with_suffix(".pyi"), base / "__init__.py")
        return next((p for p in candidates if p.is_file()), None)

    if source(dotted) is not None:
        return True
    parent, _, name = dotted.rpartition(".")
    module = source(parent)
    return module is not None and re.search(rf"\b{name}\b", module.read_text()) is not None


@pytest.mark.fast
def test_paths_and_modules_the_docs_name_exist() -> None:
    """A file, folder or module the docs name is in the repository: a moved module cannot leave the docs behind."""
    missing = []
    for page, text in _docs_texts().items():
        for span in re.findall(r"`([^`\n]+)`", text):
            missing += [f"{page}: {path}" for path in _named_paths(span) if not (ROOT / path).exists()]
            missing += [f"{page}: {name}" for name in re.findall(r"(?<![\w/.-])pyllama90a(?:\.\w+)+", span)
                        if not _module_exists(name)]
    assert not missing, "named in the docs, absent from the repository:\n" + "\n".join(sorted(set(missing)))
