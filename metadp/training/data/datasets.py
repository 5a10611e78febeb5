"""The data sets ``metadp train --data`` offers, as one registry the flags, the checks and the command read.

Each ``DataSet`` says what it is (regression or images, read from a local folder or generated) and
names its functions in ``metadp.training.data.setups`` (torch): ``setup`` (model, task pool, loss,
default inner learning rate), ``evaluate`` (held-out score), ``split`` (training and held-out image
classes for ``protonet``; image data sets only) and ``check`` (the data folder, refused before
anything is loaded or written; local data only). No torch here: ``metadp train --help`` lists the
registry without it. Adding a data set: its functions in ``data_setups`` and one :func:`register`.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from metadp.training.registry import Registry

__all__ = ["DataSet", "REGISTRY", "register", "get", "names"]


@dataclasses.dataclass(frozen=True)
class DataSet:
    """One data set (module docstring)."""

    name: str
    description: str
    images: bool  # image classification (Conv-4, reads --norm); False: regression with an MLP
    local_folder: bool  # read from a data folder (reads --data-dir and --rotations)
    setup: str
    evaluate: str
    split: Optional[str] = None
    check: Optional[str] = None


REGISTRY = Registry("data set", DataSet)
register, get, names = REGISTRY.register, REGISTRY.lookup, REGISTRY.names


register(DataSet("sinusoid", "sinusoid regression (Finn et al. 2017), generated", images=False, local_folder=False,
                 setup="sinusoid_setup", evaluate="sinusoid_evaluate"))
register(DataSet("glyphs", "synthetic stroke glyphs, generated (fast)", images=True, local_folder=False,
                 setup="glyphs_setup", evaluate="glyphs_evaluate", split="glyphs_split"))
register(DataSet("omniglot", "Omniglot from a local folder (never downloaded)", images=True, local_folder=True,
                 setup="omniglot_setup", evaluate="omniglot_evaluate", split="omniglot_split",
                 check="omniglot_check"))
