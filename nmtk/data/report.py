"""Tables that show what `prepare` did, per split."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from nmtk.console import console
from nmtk.data.cleaning import dropped_text
from nmtk.manifest import Manifest

#: Columns a table is drawn in where the output is not a terminal (a log): wide enough for every figure.
LOG_WIDTH = 160


def render_manifest(manifest: Manifest) -> None:
    src_size, tgt_size = manifest.vocab_sizes()
    vocab = f"{src_size:,} joint" if manifest.vocab.joint else f"{src_size:,} / {tgt_size:,}"
    langs = f"{manifest.source_lang} → {manifest.target_lang}"
    table = Table(title=f"prepared data ({langs}, vocabulary {vocab}, ids as {manifest.dtype})", title_justify="left")
    longest = max((len(name) for name in manifest.splits), default=5)
    table.add_column("split", no_wrap=True, min_width=longest)  # a multilingual split's whole name: train.en-de
    for column in ("pairs", "kept", "dropped\nempty/long/ratio", "cleaned\n(dropped.tsv)", "tokens\nsource / target",
                   "subwords\nper word", "max len", "time"):
        table.add_column(column, justify="right")
    for name, split in manifest.splits.items():
        d = split["dropped"]
        sides, words = split["sides"], split.get("words") or {}
        src, tgt = list(sides)
        ratio = (f"{sides[src]['tokens'] / words[src]:.2f}/{sides[tgt]['tokens'] / words[tgt]:.2f}"
                 if words.get(src) and words.get(tgt) else "-")
        table.add_row(name, f"{split['pairs_in']:,}", f"{split['kept']:,}",
                      f"{d['empty']:,}/{d['too_long']:,}/{d['ratio']:,}",
                      f"{sum(n for rule, n in d.items() if rule not in ('empty', 'too_long', 'ratio')):,}",
                      f"{sides[src]['tokens']:,} / {sides[tgt]['tokens']:,}", ratio,
                      f"{sides[src]['max_len']} / {sides[tgt]['max_len']}", f"{split['seconds']:.1f} s")
    # a log file has no width to fit: there, every figure whole (a console's print can only narrow)
    (console if console.is_terminal else Console(stderr=True, highlight=False, width=LOG_WIDTH)).print(table)
    for name, corpus in _emptied(manifest):
        rules = dropped_text(corpus["dropped"]) or "it holds no lines"
        console.print(f"[yellow]warning[/]: training corpus {name}: none of its {corpus['pairs_in']:,} pairs kept "
                      f"({rules}; dropped.tsv names each): check its files and languages")


def _emptied(manifest: Manifest) -> list[tuple[str, dict]]:
    """The training corpora that cleaning left without a pair, where a split has several (one alone
    left empty is an error of `prepare`'s own): a back-translation in the wrong language, say."""
    return [(c["name"], c) for split in manifest.splits.values() if len(split.get("corpora", ())) > 1
            for c in split["corpora"] if not c["kept"]]
