"""Test oracles: high-precision mpmath references that the fast code is checked against.

* ``references``: the RDP formulas (subsampled Gaussian, Laplace, randomized response, ...) at 60+ digits;
* ``mp_reference``: dominating pairs (densities, loss regions, hockey-stick divergences, RDP) by quadrature.

Tests import them as ``from oracles.references import ...`` (``tests/`` is on ``sys.path`` through its
``conftest.py``, as for ``_grid``).
"""
