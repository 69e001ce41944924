"""Documentation stays true: the generated recipe reference, and the commands marked runnable."""

from __future__ import annotations

import glob
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from nmtk.recipe_docs import reference_markdown

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = re.compile(r"<!-- runnable -->\s*```bash\n(.*?)```", re.DOTALL)


def test_recipe_reference_is_current() -> None:
    assert (ROOT / "docs" / "recipes.md").read_text() == reference_markdown(), (
        "docs/recipes.md is stale: run `nmtk recipe docs > docs/recipes.md`")


def runnable_commands() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for block in RUNNABLE.findall(doc.read_text()):
            for line in block.splitlines():
                line = line.split("  #")[0].strip()
                if line and not line.startswith("#"):
                    found.append((doc.name, line))
    return found


def as_nmtk_call(command: str) -> tuple[list[str], str | None, dict[str, str]] | None:
    """``[VAR=value ...] nmtk ARGS``, optionally after ``echo TEXT |``, as (ARGS, stdin, environment), for
    `cli_runner` to run in this process; None for anything else (run by bash)."""
    stdin, parts = None, command.split(" | ")
    if len(parts) == 2 and parts[0].startswith("echo "):
        stdin, command = shlex.split(parts[0])[1] + "\n", parts[1]
    elif len(parts) > 1 or re.search(r"[<>;&$`|]", command):
        return None
    words, env = shlex.split(command), {}
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    if not words or words[0] != "nmtk":
        return None
    args = [found for word in words[1:] for found in (sorted(glob.glob(word, root_dir=ROOT)) or [word])
            if "*" not in word or found]  # the shell's globbing: recipes/*.toml
    return args, stdin, env


@pytest.mark.parametrize(("doc", "command"), runnable_commands())
def test_runnable_commands_run_as_written(doc: str, command: str) -> None:
    """Each command as a user runs it: an `nmtk` command line in this process (`cli_runner`, the real
    command line without a new interpreter's start-up), anything else through bash."""
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    call = as_nmtk_call(command)
    if call is not None:
        from cli_runner import run_in_process

        args, stdin, extra = call
        result = run_in_process(*args, stdin=stdin, cwd=ROOT, env={**env, **extra})
    else:
        result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=ROOT, env=env,
                                timeout=120)
    assert result.returncode == 0, f"{doc}: `{command}` failed:\n{result.stderr}"


def test_there_are_runnable_commands() -> None:
    assert len(runnable_commands()) >= 3
    assert all(shlex.split(c) for _, c in runnable_commands())


def test_the_code_map_names_every_module() -> None:
    """docs/code-map.md is the maintainers' map: a module it does not name is a module nobody can find."""
    page = (ROOT / "docs" / "code-map.md").read_text()
    modules = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "nmtk").rglob("*.py")
                     if p.name != "__init__.py" or p.parent == ROOT / "nmtk")
    missing = [m for m in modules if f"`{m}`" not in page]
    assert not missing, f"docs/code-map.md does not name {missing}"


def test_the_cli_holds_no_library_work() -> None:
    """Nothing outside cli/ imports it (benchmarks included), and cli/ imports itself relatively."""
    offenders = [str(p.relative_to(ROOT)) for folder in ("nmtk", "benchmarks") for p in (ROOT / folder).rglob("*.py")
                 if "from nmtk.cli" in p.read_text() and p != ROOT / "nmtk" / "__main__.py"]
    assert offenders == []


def test_the_makefile_builds_the_eflomal_pyproject_asks_for_on_this_machine() -> None:
    """`make install` builds eflomal itself, without pip's cache (its C aligner is compiled for the CPU
    that builds it: a wheel cached on another CPU can die with SIGILL); the same version range as the
    ``terms`` and ``dev`` extras, so that the editable install after it changes nothing."""
    from nmtk.recipe import tomllib  # tomli below Python 3.11

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    makefile = (ROOT / "Makefile").read_text()
    (spec,) = re.findall(r"^EFLOMAL := (.+)$", makefile, re.M)
    assert spec in extras["terms"] and spec in extras["dev"]
    assert '--no-cache-dir "$(EFLOMAL)"' in makefile
