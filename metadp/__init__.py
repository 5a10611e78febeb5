"""metadp: certified differential-privacy accounting for episodic (meta-) learning."""

__version__ = "0.1.0"
__release_year__ = 2026  # the year this version was released: the year of its citation
