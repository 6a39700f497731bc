"""Array backends: tensors in, validated float64 out.

Only :mod:`mdsd_ot.backends.torch` exists so far. Importing :mod:`mdsd_ot.backends` (or
:mod:`mdsd_ot.backends.torch`) does **not** import torch: every function imports it lazily and raises
``ImportError`` with an install hint (:func:`install_hint`) when it is missing.
"""


def install_hint(extra: str) -> str:
    """How to install an optional extra of mdsd_ot: from the clone of the repository.

    The package is not published on PyPI (installing the name ``mdsd_ot`` from PyPI would get whatever
    owns that name there), so every message names the editable install of the clone.

    Parameters
    ----------
    extra : str
        Name of the optional extra (e.g. ``"torch"``).

    Returns
    -------
    str

    >>> install_hint("torch")
    'install it from your clone of the repository (in its folder): pip install -e ".[torch]"'
    """
    return f'install it from your clone of the repository (in its folder): pip install -e ".[{extra}]"'


TORCH_HINT = "torch is required for this feature; " + install_hint("torch")

__all__ = ["TORCH_HINT", "install_hint"]
