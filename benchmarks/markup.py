"""Benchmark markup through translation: Multi30k test sentences with inline tags, nmtk's way (whole
sentences, tags placed by alignment) against LibreTranslate's (each text node translated alone).

The first ``--lines`` lines of test_2016_flickr (English) each get 1-3 inline tags (``<b>``, ``<i>``,
``<a href>``, ``<span class>``) around random word spans, nested or side by side (`tagged`). Each way's
output is checked (`check`): every tag present exactly once, the whole parsed by a strict XML parser
(the tags used are XML's too), every tag's content non-empty; the tag-stripped output is scored with
sacreBLEU against the references, beside the plain text's translation (the same lines, no tags).
With ``--clients N``, a server (torch engine, 2 threads) answers N concurrent clients sending one line
a request, text and html alternately, ``--repeat`` times each: the html rate against the text rate.
Prints one JSON line.

Needs a trained run (default: runs/multi30k-en-de, the `make demo` run).
Usage: python benchmarks/markup.py [--run DIR] [--lines 200] [--clients 64] [--repeat 3] [--seed 1]
"""

from __future__ import annotations

import argparse
import html
import json
import random
import re
import signal
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from _util import ROOT, multi30k_lines

TAGS = ('<b>', '</b>'), ('<i>', '</i>'), ('<a href="https://example.com/x?a=1&amp;b=2">', '</a>'), \
    ('<span class="note">', '</span>')


def tagged(line: str, rng: random.Random) -> str:
    """``line`` (plain text) with 1-3 inline tags around random word spans: nested in another or beside
    it, never crossing; a span's last word keeps its trailing punctuation outside (``<b>dog</b>.``)."""
    words = [html.escape(w, quote=False) for w in line.split()]
    spans: list[tuple[int, int]] = []
    for _ in range(rng.randint(1, 3)):
        for _ in range(20):  # a span that nests in or keeps apart from those already chosen
            a = rng.randrange(len(words))
            b = rng.randint(a + 1, min(len(words), a + 4))
            if all(b <= c or a >= d or (c <= a and b <= d) or (a <= c and d <= b) for c, d in spans) \
                    and (a, b) not in spans:
                spans.append((a, b))
                break
    opens: dict[int, list[str]] = {}
    closes: dict[int, list[str]] = {}
    for (a, b) in sorted(spans, key=lambda s: (s[0], -s[1])):  # outer spans open first
        start, end = rng.choice(TAGS)
        opens.setdefault(a, []).append(start)
        closes.setdefault(b - 1, []).insert(0, end)
    out = []
    for k, word in enumerate(words):
        core, tail = re.match(r"(.*?)([.,;:!?]*)$", word).groups()
        if not core:
            core, tail = word, ""
        out.append("".join(opens.get(k, [])) + core + "".join(closes.get(k, [])) + tail)
    return " ".join(out)


def stripped(markup: str) -> str:
    """The text of ``markup`` (its tags taken out), whitespace collapsed."""
    return " ".join("".join(ET.fromstring(f"<r>{markup}</r>").itertext()).split())


def check(sources: list[str], outputs: list[str]) -> dict:
    """Per the acceptance: tags present exactly once, well-formed, each tag's content non-empty."""
    def tags(markup: str) -> list[str]:
        return sorted(re.findall(r"</?[a-z]+[^>]*>", markup))

    parsed = exact = nonempty = 0
    for source, output in zip(sources, outputs, strict=True):
        exact += tags(source) == tags(output)
        try:
            root = ET.fromstring(f"<r>{output}</r>")
        except ET.ParseError:
            continue
        parsed += 1
        nonempty += all("".join(e.itertext()).strip() for e in root.iter() if e.tag != "r")
    n = len(sources)
    return {"tags_exactly_once": round(exact / n, 4), "well_formed": round(parsed / n, 4),
            "content_non_empty": round(nonempty / n, 4)}


def text_nodes(translator, documents: list[str], search) -> list[str]:  # noqa: ANN001
    """LibreTranslate's (argos-translate's) way: each text node translated alone, tags kept between."""
    pieces = [re.split(r"(<[^>]+>)", doc) for doc in documents]
    nodes = [(d, k) for d, parts in enumerate(pieces) for k, part in enumerate(parts)
             if not part.startswith("<") and part.strip()]
    lines = [html.unescape(pieces[d][k].strip()) for d, k in nodes]
    hyps = translator.hypotheses(lines, search)
    for (d, k), h in zip(nodes, hyps, strict=True):
        part = pieces[d][k]
        lead, trail = part[: len(part) - len(part.lstrip())], part[len(part.rstrip()):]
        pieces[d][k] = lead + html.escape(translator.detokenize(h[0]) if h else "", quote=False) + trail
    return ["".join(parts) for parts in pieces]


def bleu(hypotheses: list[str], references: list[str]) -> float:
    import sacrebleu

    return round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 2)


def offline(run: Path, sources: list[str], documents: list[str], references: list[str]) -> dict:
    from nmtk.decode.load import LoadOptions, load_translator
    from nmtk.decode.markup import translate_markup
    from nmtk.decode.search.config import SearchConfig
    from nmtk.model_source import resolve_model

    model = resolve_model(run, None)
    translator = load_translator(model, LoadOptions(model=run))
    search = SearchConfig.from_recipe(model.recipe.decode)
    timed = {}
    start = time.perf_counter()
    plain = [translator.detokenize(h[0]) for h in translator.hypotheses(sources, search)]
    timed["plain"] = time.perf_counter() - start
    start = time.perf_counter()
    ours = translate_markup(translator, documents, search, "html")
    timed["nmtk"] = time.perf_counter() - start
    start = time.perf_counter()
    nodes = text_nodes(translator, documents, search)
    timed["text_nodes"] = time.perf_counter() - start
    plain_bleu = bleu(plain, references)
    out = {"plain": {"bleu": plain_bleu, "sent_per_s": round(len(sources) / timed["plain"], 1)}}
    for name, outputs in (("nmtk", ours), ("text_nodes", nodes)):
        score = bleu([stripped(o) for o in outputs], references)
        out[name] = {**check(documents, outputs), "bleu_stripped": score,
                     "bleu_vs_plain": round(score / plain_bleu, 4), "sent_per_s": round(len(sources) / timed[name], 1)}
    out["examples"] = [{"source": documents[i], "nmtk": ours[i], "text_nodes": nodes[i]} for i in range(3)]
    return out


def served(run: Path, sources: list[str], documents: list[str], clients: int, repeat: int) -> dict:
    """One server; ``clients`` concurrent clients, a line a request, text and html in turn."""
    from serve import _health, _port, _send

    port = _port()
    server = subprocess.Popen([sys.executable, "-m", "nmtk", "serve", "-m", str(run), "--port", str(port),
                               "--threads", "2"], cwd=ROOT, stderr=subprocess.DEVNULL)
    rates: dict[str, list[float]] = {"text": [], "html": []}
    errors = 0
    try:
        for _ in range(600):
            try:
                _health(f"http://127.0.0.1:{port}")
                break
            except OSError:
                time.sleep(0.2)
        _send(port, sources[:50], 1)  # warm-up
        for _ in range(repeat):
            for fmt, lines in (("text", sources), ("html", documents)):
                _, failed, seconds = _send(port, lines, clients, 1, fmt)
                errors += len(failed)
                rates[fmt].append(round(len(lines) / seconds, 1))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
    text, markup = statistics.median(rates["text"]), statistics.median(rates["html"])
    paired = [round(h / t, 3) for t, h in zip(rates["text"], rates["html"], strict=True)]
    return {"clients": clients, "text_sent_per_s": text, "html_sent_per_s": markup, "runs": rates,
            "html_vs_text": round(markup / text, 3), "html_vs_text_runs": paired,
            "html_vs_text_median_of_runs": statistics.median(paired), "errors": errors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=ROOT / "runs" / "multi30k-en-de")
    parser.add_argument("--lines", type=int, default=200)
    parser.add_argument("--clients", type=int, default=0, help="also measure a server at this many clients")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    sources = multi30k_lines("test_2016_flickr.en.gz")[: args.lines]
    references = multi30k_lines("test_2016_flickr.de.gz")[: args.lines]
    documents = [tagged(line, rng) for line in sources]
    result = {"benchmark": "markup", "run": str(args.run), "lines": len(sources), "seed": args.seed,
              **offline(args.run, sources, documents, references)}
    if args.clients:
        result["served"] = served(args.run, sources, documents, args.clients, args.repeat)
    print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    main()
