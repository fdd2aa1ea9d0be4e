#!/usr/bin/env python3
"""Per-hunk report of how the patch series applies to a llama.cpp tree: what a rebase onto a new pin costs.

    python vendor/patch_report.py <llama.cpp tree> [--patches DIR]
    python vendor/patch_report.py --pinned [--patches DIR]

The series (vendor/patches/*.patch, or DIR's, in name order) is applied to a copy of the tree in a temporary
directory; the given tree is never written to. The copy leaves out the parts the build never unpacks
(prepare_source.SKIPPED_TOP), so a hunk there fails here as it would in the build. --pinned starts from the
unpatched source the build would use (PYLLAMA90A_LLAMA_CPP_SRC, else the pinned sdist in the cache; fetched
through pip only where not cached).
Each hunk is reported as clean, applied with an offset and/or fuzz (how much), or FAILED (file, hunk header,
why), then one summary line. Exit status: 0 only if every hunk applied, 1 if any failed, 2 if no report
could be made.

Uses GNU patch, not `git apply --check -v`: it is what vendor/prepare_source.py applies the series with (same
options, so fuzz it accepts is fuzz the build accepts), its --verbose output names every hunk's outcome,
offset and fuzz included, and it applies the hunks it can when others fail, so later patches are still
measured. git apply --check names a file's first failing hunk only; with --reject it names rejected hunks
but no offsets, and it never fuzzes, so its verdict would not be the build's. Patches are applied for real
in the copy, not with --dry-run: later patches need the earlier ones' changes.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

VENDOR = Path(__file__).resolve().parent
sys.path.insert(0, str(VENDOR))
from prepare_source import GNU_PATCH_ARGS, PATCHES, PrepareError, copy_tree, fill_source, load_pin  # noqa: E402

HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
HUNK_RESULT = re.compile(r"^Hunk #(\d+) (succeeded|FAILED|ignored) at (\d+)"
                         r"(?: with fuzz (\d+))?(?: \(offset (-?\d+) lines?\))?")
# why patch skipped a whole file: the phrase in its output, and what the report says
SKIP_REASONS = [
    ("can't find file to patch", "no such file in the tree"),
    ("which already exists", "the file it creates already exists"),
    ("Reversed (or previously applied) patch detected", "looks reversed or already applied"),
]


@dataclass
class Hunk:
    header: str           # the @@ line, function context included
    old_lines: list[str]  # context and removed lines: what the hunk needs to find in the file


@dataclass
class FileDiff:
    path: str  # as patch -p1 names it
    hunks: list[Hunk] = field(default_factory=list)


@dataclass
class HunkResult:
    patch: str
    path: str
    number: int  # 1-based within its file, as patch counts
    header: str
    status: str  # clean | offset | fuzz | failed
    detail: str = ""


def _strip_path(name: str) -> str:
    name = name.split("\t")[0].strip()
    return name.split("/", 1)[1] if "/" in name else name  # -p1


def parse_patch(patch: Path) -> list[FileDiff]:
    """The files and hunks of a unified diff, in order. Hunk bodies are consumed by their line counts, so a
    removed line that starts with '-- ' is never taken for a file header."""
    lines = patch.read_text().splitlines()
    files: list[FileDiff] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            new = _strip_path(lines[i + 1][4:])
            old = _strip_path(line[4:])
            files.append(FileDiff(old if lines[i + 1][4:].startswith("/dev/null") else new))
            i += 2
            continue
        m = HUNK_HEADER.match(line)
        if m and files:
            old_n = int(m.group(2) if m.group(2) is not None else 1)
            new_n = int(m.group(4) if m.group(4) is not None else 1)
            hunk = Hunk(line, [])
            i += 1
            while (old_n > 0 or new_n > 0) and i < len(lines):
                body = lines[i]
                tag = body[:1]
                if tag in (" ", ""):  # some tools drop the space of an empty context line
                    hunk.old_lines.append(body[1:])
                    old_n -= 1
                    new_n -= 1
                elif tag == "-":
                    hunk.old_lines.append(body[1:])
                    old_n -= 1
                elif tag == "+":
                    new_n -= 1
                elif tag != "\\":  # "\ No newline at end of file"
                    raise ValueError(f"{patch.name}: malformed hunk body at line {i + 1}: {body!r}")
                i += 1
            files[-1].hunks.append(hunk)
            continue
        i += 1
    return files


def _segments(output: str) -> list[list[str]]:
    """patch --verbose output split per file section: each starts with a line beginning 'Hmm...' (but for
    the one that says it skips what follows the last diff, e.g. format-patch's '-- ' signature)."""
    segments: list[list[str]] = []
    for line in output.splitlines():
        if line.startswith("Hmm...") and "Ignoring the trailing garbage" not in line:
            segments.append([])
        if segments and not line.startswith("|"):  # '|' lines echo the patch's own text
            segments[-1].append(line)
    return segments


def apply_patch(tree: Path, patch: Path) -> list[HunkResult]:
    """Apply one patch to tree (a scratch copy) and return the outcome of each of its hunks."""
    files = parse_patch(patch)
    proc = subprocess.run(["patch", *GNU_PATCH_ARGS, "--verbose", "--no-backup-if-mismatch", "--reject-file=-",
                           "-d", str(tree), "-i", str(patch)], capture_output=True, text=True)
    segments = _segments(proc.stdout)
    trouble = proc.stderr.strip().splitlines()[-1] if proc.returncode > 1 and proc.stderr.strip() else ""
    if not trouble and len(segments) != len(files):
        raise RuntimeError(f"{patch.name}: patch reported {len(segments)} file sections, the diff has {len(files)}")
    results = []
    for k, diff in enumerate(files):
        text = segments[k] if k < len(segments) else []
        named = [ln[len("patching file "):].strip() for ln in text if ln.startswith("patching file ")]
        if named and named[0] != diff.path:
            raise RuntimeError(f"{patch.name}: patch applied section {k + 1} to {named[0]}, the diff names {diff.path}")
        skipped = next((why for phrase, why in SKIP_REASONS if any(phrase in ln for ln in text)), "")
        outcome = {int(m.group(1)): m for m in map(HUNK_RESULT.match, text) if m}
        for n, hunk in enumerate(diff.hunks, 1):
            r = HunkResult(patch.name, diff.path, n, hunk.header, "clean")
            m = outcome.get(n)
            if m is None or m.group(2) != "succeeded":
                r.status = "failed"
                r.detail = skipped or trouble or (
                    f"context not found (expected at line {m.group(3)})" if m else "not reported by patch")
            elif m.group(4):
                r.status = "fuzz"
                r.detail = f"fuzz {m.group(4)}" + (f", offset {int(m.group(5)):+d}" if m.group(5) else "")
            elif m.group(5):
                r.status = "offset"
                r.detail = f"offset {int(m.group(5)):+d}"
            results.append(r)
    return results


def report(tree: Path, patches: list[Path], out=None) -> list[HunkResult]:
    """Print the per-hunk report of the series on tree (already a scratch copy) and return the results."""
    every: list[HunkResult] = []
    for patch in patches:
        results = apply_patch(tree, patch)
        every += results
        failed = sum(r.status == "failed" for r in results)
        hunks = f"{len(results)} hunk" + ("s" if len(results) != 1 else "")
        print(f"{patch.name}: {hunks}, " + (f"{failed} FAILED" if failed else "all applied"), file=out)
        path = None
        for r in results:
            if r.path != path:
                path = r.path
                print(f"  {path}", file=out)
            status = "FAILED" if r.status == "failed" else r.status
            print(f"    #{r.number:<3} {status:<7} {r.header}" + (f"  [{r.detail}]" if r.detail else ""), file=out)
    counts = {s: sum(r.status == s for r in every) for s in ("clean", "offset", "fuzz", "failed")}
    broken = list(dict.fromkeys(r.patch for r in every if r.status == "failed"))
    print(f"{'FAILED' if broken else 'OK'}: {len(patches)} patches, {len(every)} hunks: {counts['clean']} clean, "
          f"{counts['offset']} offset, {counts['fuzz']} fuzz, {counts['failed']} failed"
          + (f" (in {', '.join(broken)})" if broken else ""), file=out)
    return every


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("tree", nargs="?", type=Path, help="a llama.cpp tree (only read: the series goes on a copy)")
    where.add_argument("--pinned", action="store_true", help="the unpatched source the build would use")
    ap.add_argument("--patches", type=Path, help="directory of *.patch files (default: vendor/patches)")
    args = ap.parse_args(argv)
    patches = sorted(args.patches.glob("*.patch")) if args.patches else PATCHES
    if not patches:
        print(f"patch_report: no *.patch files in {args.patches}", file=sys.stderr)
        return 2
    if args.tree and not (args.tree / "include" / "llama.h").is_file():
        print(f"patch_report: {args.tree} is not a llama.cpp tree (no include/llama.h)", file=sys.stderr)
        return 2
    if not shutil.which("patch"):
        print("patch_report: GNU patch is not installed", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="pyllama90a-patch-report.") as tmp:
        copy = Path(tmp) / "llama.cpp"
        try:
            if args.pinned:
                fill_source(copy, load_pin())
            else:
                copy_tree(args.tree, copy)
            results = report(copy, patches)
        except (PrepareError, RuntimeError, ValueError, OSError) as e:
            print(f"patch_report: {e}", file=sys.stderr)
            return 2
    return 1 if any(r.status == "failed" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
