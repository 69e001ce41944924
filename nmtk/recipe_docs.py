"""The recipe reference (docs/recipes.md), generated from the pydantic models so it cannot go stale."""

from __future__ import annotations

import json
from enum import Enum
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from nmtk.recipe import (
    RENAMED_KEYS,
    AverageSection,
    BatchingSection,
    CleanSection,
    Corpus,
    CorpusFile,
    DataSection,
    DecodeSection,
    LanguagePair,
    ModelSection,
    Modifier,
    OptimSection,
    Recipe,
    Stage,
    TokenizerSection,
    TrainSection,
)

SECTIONS: list[tuple[str, type[BaseModel]]] = [
    ("top level", Recipe), ("[data]", DataSection), ("[data.clean]", CleanSection),
    ("[[data.pairs]]", LanguagePair),
    ("[[data.train]], [data.valid], [[data.test]]", Corpus),
    ("corpus source / target", CorpusFile), ("[tokenizer]", TokenizerSection), ("[batching]", BatchingSection),
    ("[model]", ModelSection), ("[optim]", OptimSection), ("[train]", TrainSection),
    ("[[train.modifiers]]", Modifier), ("[[train.stages]]", Stage), ("[decode]", DecodeSection),
    ("[average]", AverageSection),
]


def _type(annotation: Any) -> str:
    if isinstance(annotation, type) and issubclass(annotation, Enum):  # the choices, as TOML spells them
        return " | ".join(f'"{member.value}"' for member in annotation)
    text = str(annotation).replace("typing.", "").replace("nmtk.recipe.", "")
    return text.replace("<class '", "").replace("'>", "")


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.default
    if isinstance(value, BaseModel):
        return "(section defaults)"
    return json.dumps(value) if not isinstance(value, tuple) else json.dumps(list(value))


def reference_markdown() -> str:
    lines = ["# Recipe reference", "",
             "Generated from the recipe models by `nmtk recipe docs`; `tests/unit/test_docs.py` fails when this",
             "page and the code disagree. Unknown keys are errors. Override any field on the command line with",
             "`--set section.field=value` (validated like the file); an entry of a list by its index from 0,",
             "`--set data.train.1.weight=2` or `--set 'data.train[1].weight=2'`. `nmtk recipe schema` prints the",
             "JSON Schema.", ""]
    for title, model in SECTIONS:
        lines += [f"## {title}", "", (model.__doc__ or "").strip().splitlines()[0], "",
                  "| field | type | default | description |", "|---|---|---|---|"]
        for name, field in model.model_fields.items():
            description = (field.description or "").replace("\n", " ").replace("|", "\\|")
            description = " ".join(description.split())
            type_text = _type(field.annotation).replace("|", "\\|")
            lines.append(f"| `{name}` | `{type_text}` | `{_default(field)}` | {description} |")
        lines.append("")
    lines += ["## Renamed keys", "",
              "Read as their new names, with a one-line notice (the old names will go):", "",
              "| old key | new key |", "|---|---|"]
    lines += [f"| `{old}` | `{new}` |" for old, new in RENAMED_KEYS.items()]
    lines.append("")
    return "\n".join(lines)
