"""Sub-commands of the ``mdsd-ot`` CLI, one module each (see :mod:`mdsd_ot.cli`)."""
