"""metadp: certified differential-privacy accounting for episodic (meta-) learning."""

__version__ = "0.1.0"
