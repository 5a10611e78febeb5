"""The trainer's data: the data sets ``metadp train --data`` offers (``datasets``: a registry, no torch;
their builders in ``setups``), where images come from (``sources``, gathering ``images`` and
``omniglot``: local files only, never a download), fixed task pools (``tasks``) and the samplers that
execute a ``metadp.sampling`` scheme over them (``samplers``, ``subsets``).

The package imports nothing, so the registry loads without torch.
"""
