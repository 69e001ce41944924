"""The command line: version, help, errors as one line, commands not built yet."""

from __future__ import annotations

import json

import pytest

from nmtk import __version__


def test_version(nmtk) -> None:
    result = nmtk("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"nmtk {__version__}"


def test_help_lists_every_command(nmtk) -> None:
    result = nmtk("--help")
    assert result.returncode == 0
    for command in ("prepare", "train", "average", "translate", "score", "recipe"):
        assert command in result.stdout


def test_recipe_show_json_is_one_object(nmtk) -> None:
    result = nmtk("recipe", "show", "recipes/multi30k-en-de.toml", "--set", "model.dropout=0.3", "--json")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["recipe"]["model"]["dropout"] == 0.3
    assert payload["parameters"] > 0 and payload["derived"]["recipe_hash"]


def test_recipe_show_to_a_file_is_the_recipe_in_toml(nmtk, tmp_path) -> None:
    """Redirected, `recipe show` writes the whole resolved recipe as TOML (no line cut at 80 columns: the
    WMT recipes' corpus URLs are longer), the derived figures as comments: the file is a recipe again."""
    import tomllib

    from nmtk.recipe import load_recipe

    result = nmtk("recipe", "show", "recipes/wmt14-en-de-big.toml", "--set", "model.dropout=0.3")
    assert result.returncode == 0, result.stderr
    data = tomllib.loads(result.stdout)
    assert data["model"]["dropout"] == 0.3 and "# parameters: 214,245,376" in result.stdout
    shown = tmp_path / "shown.toml"
    shown.write_text(result.stdout)
    original = load_recipe("recipes/wmt14-en-de-big.toml", ["model.dropout=0.3"])
    assert load_recipe(shown) == original  # every field, the long URLs and the name included


def test_recipe_schema_is_json(nmtk) -> None:
    result = nmtk("recipe", "schema")
    assert result.returncode == 0
    assert json.loads(result.stdout)["title"] == "nmtk recipe"


def test_validate_several_files_reports_each(nmtk, tmp_path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("name = 'x'\n")
    result = nmtk("recipe", "validate", "recipes/multi30k-en-de.toml", str(bad))
    assert result.returncode == 1
    assert "data: required field is missing" in result.stderr


def test_batch_size_points_to_beam_tokens(nmtk) -> None:
    """fairseq's and Marian's --batch-size: click suggested --buffer-size, which means something else."""
    result = nmtk("translate", "--batch-size", "32", stdin="x\n")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "--beam-tokens" in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_an_unknown_precision_names_the_choices_without_pydantic_s_prefix(nmtk) -> None:
    result = nmtk("translate", "-m", "no-such-run", "--precision", "int4", stdin="x\n")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "'int4' is not one of 'auto', 'fp32'" in result.stderr and "Value error" not in result.stderr


@pytest.mark.parametrize(("args", "message"), [
    (("--topk", "5", "--seed", "3"), "--topk, --seed: only with --sampling (without it, nothing uses them)"),
    (("--temperature", "0.5"), "--temperature: only with --sampling"),
    (("--alignment-layer", "1"), "--alignment-layer: only with --print-alignment or --format html|xml"),
    (("--translate-attributes", "alt"), "--translate-attributes: only with --format html or xml"),
])
def test_an_option_that_needs_another_is_one_line_without_it(nmtk, args: tuple[str, ...], message: str) -> None:
    """They did nothing, silently (``--topk 5`` alone searched the beam); refused before any model loads."""
    result = nmtk("translate", "-m", "no-such-run", *args, stdin="x\n")
    assert result.returncode == 1 and result.stderr.startswith(f"error: {message}"), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr


def test_the_typer_internals_readable_help_patches_are_there() -> None:
    """`_readable_help` patches typer's private names (pyproject pins typer below the next minor until a
    supported hook exists): when an upgrade renames one, this fails loudly instead of `--help` quietly
    losing its panels, flags and folding."""
    import inspect

    import typer.core
    import typer.rich_utils

    option, command = typer.core.TyperOption, typer.core.TyperCommand
    own = {name: inspect.unwrap(function) for name, function in (  # typer's, under nmtk's patch if applied
        ("display_type_rich", option.display_type_rich), ("_get_number_range_help_str",
                                                          option._get_number_range_help_str),
        ("format_help", command.format_help), ("_make_rich_text", typer.rich_utils._make_rich_text))}
    assert all(function.__name__ == name for name, function in own.items()), own
    assert "ctx" in inspect.signature(own["display_type_rich"]).parameters
    assert "formatter" in inspect.signature(own["format_help"]).parameters
    assert {"text", "style", "markup_mode"} <= set(inspect.signature(own["_make_rich_text"]).parameters)


def test_help_shows_flags_bare_ranges_folded_and_panels(nmtk) -> None:
    """What the patches do, seen in the output: ``--force`` takes no value, a number's range is not in its
    type column, and the options are grouped into the command's panels."""
    import os

    result = nmtk("translate", "--help", env={**os.environ, "COLUMNS": "100"})
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "--force" in out and "<bool>" not in out
    assert "range>" not in out and "x>=" not in out
    assert all(panel in out for panel in ("Model", "Search"))


def test_a_signal_no_command_handled_is_one_line_with_its_exit_code(nmtk, monkeypatch) -> None:
    """Typer turns a KeyboardInterrupt into a silent exit 130, SIGTERM's too (issue 77: a late Ctrl-C of
    `prepare` exited 130 with no line): nmtk's command group says it, with 130 or 143."""
    from nmtk import recipe as recipes
    from nmtk.interrupts import Terminated

    for raised, code in ((KeyboardInterrupt, 130), (Terminated, 143)):
        def stopped(*args, raised=raised, **kwargs):
            raise raised

        monkeypatch.setattr(recipes, "load_recipe", stopped)
        result = nmtk("recipe", "show", "recipes/multi30k-en-de.toml")
        assert result.returncode == code and result.stderr == "error: interrupted\n", (code, result.stderr)
