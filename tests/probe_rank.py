"""One rank of the two-process probe test (`test_train_parts.py`), launched by torchrun (gloo): the toy
trainer wrapped in DDP, its update costs counted (`nmtk.train.probe`), written as ``costs<RANK>.json``.

Usage: python -m torch.distributed.run --nproc_per_node 2 tests/probe_rank.py TMP
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import toy_trainer  # noqa: E402

from nmtk.train.distributed import init_distributed, shutdown  # noqa: E402
from nmtk.train.probe import update_costs  # noqa: E402


def main() -> None:
    tmp = Path(sys.argv[1])
    info = init_distributed("cpu")
    trainer = toy_trainer(tmp / f"rank{info.rank}", "train.max_updates=9", "train.log_every_updates=4",
                          "train.validate_every_updates=1000", "train.save_every_minutes=0", "train.update_freq=4",
                          "train.precision=fp32", info=info)
    trainer.step.wrap()
    costs, sites = update_costs(trainer)
    (tmp / f"costs{info.rank}.json").write_text(json.dumps({"costs": [[c.update, c.syncs] for c in costs],
                                                            "sites": sites}))
    trainer.close()
    shutdown(info)  # the gloo group freed now, not in the interpreter's finalisation (SIGABRT: pytorch#179291)


if __name__ == "__main__":  # prepare's worker processes are spawned and import this file again
    main()
