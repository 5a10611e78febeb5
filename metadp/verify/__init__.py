"""Verification: high-precision references (``references``); empirical audits and cross-checks are planned."""
