"""Benchmark a distilled student against its teacher on Multi30k test_2016_flickr: speed, memory, disk, BLEU.

Each model is decoded as `benchmarks/translate.py` decodes (a fresh process per row, 1,000 sentences,
beam 4, 2 threads, medians of ``--repeat``): in nmtk fp32, as a CTranslate2 int8 export, and as one
with the run's lexical shortlist (`nmtk shortlist`, its export's vmap.txt; made when missing). Prints
one JSON line: per model and row sentences/s, peak RSS, BLEU and the size on disk of what it loads (the
checkpoint, or the export's model.bin), then the student's CTranslate2 int8 + shortlist against the
teacher's CTranslate2 int8 and nmtk fp32 (speed), its BLEU less the teacher's, and its size over the
teacher's.

``--distill`` first runs `nmtk distill TEACHER recipes/multi30k-en-de-student.toml` (the teacher
translates the 29,000 training sources, the student trains the recipe's 12,000 updates), unless the
student run already holds a checkpoint. The default teacher is `recipes/multi30k-en-de-teacher.toml`'s run
(train it on a GPU and average it first: 6,000 updates are minutes there, hours on a CPU); ``--teacher
runs/multi30k-en-de`` measures the demo model as the teacher.

Usage: python benchmarks/distill.py [--teacher runs/multi30k-en-de-teacher] [--student runs/multi30k-en-de-student]
                                    [--distill] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import translate as rows_of
from _util import ROOT, data_root

ROWS = "nmtk:fp32,ct2:int8,ct2:int8+shortlist"
STUDENT_RECIPE = ROOT / "recipes" / "multi30k-en-de-student.toml"


def loaded_size(run: Path, row: str) -> int:
    """Bytes on disk of what a row loads: the run's default checkpoint, or its export's model.bin."""
    from nmtk.model_source import resolve_model

    if row.startswith("nmtk:"):
        return resolve_model(run).checkpoint.stat().st_size
    quantization, listed = row.split(":", 1)[1].removesuffix("+shortlist"), row.endswith("+shortlist")
    return (rows_of.export_dir(run, quantization, listed) / "model.bin").stat().st_size


def measure(run: Path, args: argparse.Namespace) -> dict[str, object]:
    options = argparse.Namespace(run=run, rows=args.rows, repeat=args.repeat, threads=args.threads, beam=args.beam,
                                 device="cpu")
    report = rows_of.rows(options)
    for row in args.rows.split(","):
        report[row]["disk_mib"] = round(loaded_size(run, row) / 2**20, 2)
    return {k: v for k, v in report.items() if ":" in k}


def distil(teacher: Path, student: Path) -> None:
    if any(student.glob("checkpoint_*.pt")):
        return
    env = {**os.environ, "NMTK_DATA": str(data_root())}
    subprocess.run([sys.executable, "-m", "nmtk", "distill", str(teacher), str(STUDENT_RECIPE), "--run-dir",
                    str(student), "--threads", "2"], check=True, cwd=ROOT, env=env)
    subprocess.run([sys.executable, "-m", "nmtk", "average", str(student)], check=True, cwd=ROOT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teacher", type=Path, default=ROOT / "runs" / "multi30k-en-de-teacher")
    parser.add_argument("--student", type=Path, default=ROOT / "runs" / "multi30k-en-de-student")
    parser.add_argument("--rows", default=ROWS)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--distill", action="store_true", help="distil the student first when it has no checkpoint")
    args = parser.parse_args()
    if args.distill:
        distil(args.teacher, args.student)
    teacher, student = measure(args.teacher, args), measure(args.student, args)
    fast, base = "ct2:int8+shortlist", "ct2:int8"
    report: dict[str, object] = {"benchmark": "distill", "sentences": 1000, "beam": args.beam, "threads": args.threads,
                                 "teacher": {"run": str(args.teacher), **teacher},
                                 "student": {"run": str(args.student), **student}}
    if fast in student and base in teacher and "nmtk:fp32" in teacher:
        report["student_" + fast] = {
            "speed_vs_teacher_" + base: round(student[fast]["sentences_per_s"] / teacher[base]["sentences_per_s"], 2),
            "speed_vs_teacher_nmtk:fp32": round(student[fast]["sentences_per_s"]
                                                / teacher["nmtk:fp32"]["sentences_per_s"], 2),
            "bleu_minus_teacher_nmtk:fp32": round(student[fast]["bleu"] - teacher["nmtk:fp32"]["bleu"], 2),
            "disk_vs_teacher_" + base: round(student[fast]["disk_mib"] / teacher[base]["disk_mib"], 3),
            "disk_vs_teacher_nmtk:fp32": round(student[fast]["disk_mib"] / teacher["nmtk:fp32"]["disk_mib"], 3)}
    print(json.dumps(report))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
