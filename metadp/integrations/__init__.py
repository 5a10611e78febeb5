"""Bridges to the libraries people already train and account with (optional extras).

* ``metadp.integrations.opacus`` (``pip install "metadp[opacus]"``): importing it registers an Opacus
  accountant named ``"metadp"`` (``PrivacyEngine(accountant="metadp")``) whose epsilon is metadp's
  certified PLD upper bound, and checks whether a DataLoader's batches are the Poisson samples that
  every Opacus accountant assumes.
* ``metadp.integrations.dp_accounting``: converts dp-accounting's ``DpEvent`` trees to metadp events
  and back, and reads them from JSON (``metadp plan --dp-event FILE.json``).

Nothing here is imported by ``import metadp``: each module imports its library when it is imported.
"""
