"""Checkpoints of the train state in WORKDIR/checkpoints: saved with orbax
and checksummed (store.py, checksums.py), resumed from or fine-tuned from
(resume.py), and written from converted pretrained weights (converted.py).

`from recipes import checkpoint` gives the workdir's checkpoints:
`checkpoint.opened(workdir)`, `checkpoint.save(mngr, step, state)`,
`checkpoint.restore_latest(mngr, target)` and the rest of store.py.
"""

from recipes.checkpoint.store import (check_saved, manager, opened, restore,
                                        restore_latest, save)
