"""Episodic data for the trainers (DESIGN.md sec. 7): tasks and class pools, read from local files only.

* the sinusoid regression benchmark of Finn, Abbeel & Levine 2017 (MAML, arXiv:1703.03400), Sec. 5.1:
  ``metadp.training.data.tasks.SinusoidPool``.
* ``load_omniglot_background`` and ``load_one_shot_runs``: Omniglot read straight from the release
  zips in ``data_dir()`` (``metadp.training.data.omniglot``).
* ``synthetic_glyphs``: procedurally drawn stroke glyphs, a learnable stand-in for fast tests;
  ``load_image_folder`` (CIFAR-FS style) and ``load_mini_imagenet_csv`` (Ravi & Larochelle 2017 csv
  splits) for users who have those datasets (``metadp.training.data.images``).

This module gathers them in one place; the data sets ``metadp train --data`` offers are registered in
``metadp.training.data.datasets``.
"""

from __future__ import annotations

from metadp.training.data.images import (ImagePool, OneShotRun, load_image_folder, load_mini_imagenet_csv,
                                    synthetic_glyphs)
from metadp.training.data.omniglot import (BACKGROUND_ZIPS, DATA_ENV_VAR, DATA_SEARCH_ORDER, ONE_SHOT_ZIP,
                                      check_omniglot_folder, data_dir, load_omniglot_background, load_one_shot_runs)

__all__ = ["data_dir", "check_omniglot_folder", "ImagePool", "OneShotRun", "load_omniglot_background",
           "load_one_shot_runs", "synthetic_glyphs", "load_image_folder", "load_mini_imagenet_csv", "DATA_ENV_VAR",
           "BACKGROUND_ZIPS", "ONE_SHOT_ZIP", "DATA_SEARCH_ORDER"]
