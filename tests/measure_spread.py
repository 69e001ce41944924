"""Measure the spread of the suite's learning outcomes, to set their thresholds (issue 43).

A threshold that holds on one CPU's float summation order turns CI red on the next machine. Thread
count and precision change the summation order the way another CPU does, so each learning test's
training is repeated over seeds x {1, 2} threads x {fp32, bf16} and its asserted figures printed, one
JSON line per run; the tests set their thresholds below the worst run with a margin and say so.

    python tests/measure_spread.py copy-task   # tests/integration/test_copy_task.py (~3 min on 2 cores)
    python tests/measure_spread.py copy-run    # the copy_run fixture's figures (~12 min on 2 cores)

Nothing else should run meanwhile only for the timings' sake: the figures themselves do not depend on it.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

SEEDS = range(5)
THREADS = (1, 2)
PRECISIONS = ("fp32", "bf16")


def copy_task() -> None:
    import torch
    from helpers import copy_outcome, train_copy_models

    for seed, threads, precision in itertools.product(SEEDS, THREADS, PRECISIONS):
        torch.set_num_threads(threads)
        models = train_copy_models((100, 250, 800), seed=seed, precision=precision)
        for step, model in models.items():
            torch.set_num_threads(2)
            print(json.dumps({"test": "copy_task", "seed": seed, "threads": threads, "precision": precision,
                              "updates": step, **copy_outcome(model)}), flush=True)


def copy_run() -> None:
    import numpy as np
    import torch
    from helpers import copy_pairs, toy_recipe, write_corpus

    from nmtk.checkpoint import load_model
    from nmtk.decode.search.alignment import cross_attention
    from nmtk.model_source import default_checkpoint
    from nmtk.rundir import RunDir
    from nmtk.text.pairs import model_pipelines

    for seed, threads, precision in itertools.product(SEEDS, THREADS, PRECISIONS):
        with tempfile.TemporaryDirectory() as name:
            tmp = Path(name)
            root = tmp / "root"
            write_corpus(root, "train", copy_pairs(3000, 1))
            write_corpus(root, "valid", copy_pairs(40, 2))
            write_corpus(root, "test", copy_pairs(40, 3))
            recipe = toy_recipe(tmp, extra="log_every_updates = 20", precision=precision)
            env = {**os.environ, "NMTK_DATA": str(root), "OMP_NUM_THREADS": "1"}
            sets = ["train.max_updates=700", "train.validate_every_updates=350", "train.save_every_updates=100",
                    "model.d_model=64", "model.d_ff=128", "batching.batch_tokens=1024", "optim.lr=0.002",
                    "tokenizer.vocab_size=140", f"train.seed={seed}"]  # as tests/conftest.py's copy_run
            cmd = [sys.executable, "-m", "nmtk", "train", str(recipe), "--data", str(tmp / "data"), "--run-dir",
                   str(tmp / "run"), "--threads", str(threads), *(a for s in sets for a in ("--set", s))]
            subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=tmp)
            records = [json.loads(line) for line in (tmp / "run" / "train.jsonl").read_text().splitlines()]
            losses = [r["loss"] for r in records if "validation" not in r]
            bleu = [r["bleu"] for r in records if r.get("validation")]
            run = RunDir(tmp / "run")
            model = load_model(default_checkpoint(run)[0], torch.device("cpu"), run.manifest().vocab.sha256)
            src_pipe = model_pipelines(run.path, run.recipe(), run.manifest())[0][0]
            sources = [src_pipe.encode(a) for a, _ in copy_pairs(30, 9)]
            matrices = cross_attention(model, sources, sources, -1, torch.device("cpu"))
            diagonal = sum(int((m.argmax(axis=1) == np.arange(len(m))).sum()) for m in matrices)
            text = "\n".join(a for a, _ in copy_pairs(20, 12)) + "\n"  # test_a_quantised_export_still_translates
            nmtk = [sys.executable, "-m", "nmtk"]
            subprocess.run([*nmtk, "export", str(tmp / "run"), "-o", str(tmp / "int8"), "--quantization", "int8"],
                           check=True, capture_output=True, env=env, cwd=tmp)
            int8, full = (subprocess.run([*nmtk, "translate", "-m", str(tmp / m), *p], input=text, check=True,
                                         capture_output=True, text=True, env=env, cwd=tmp).stdout.splitlines()
                          for m, p in (("int8", []), ("run", ["--precision", "fp32"])))
            print(json.dumps({"test": "copy_run", "seed": seed, "threads": threads, "precision": precision,
                              "loss_ratio": losses[-1] / losses[0], "bleu_350": bleu[0], "bleu_700": bleu[-1],
                              "diagonal": diagonal / sum(len(m) for m in matrices),
                              "int8_same": sum(a == b for a, b in zip(int8, full, strict=True))}), flush=True)


if __name__ == "__main__":
    {"copy-task": copy_task, "copy-run": copy_run}[sys.argv[1]]()
