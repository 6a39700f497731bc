"""Array backends: tensors in, validated float64 out.

Only :mod:`mdsd_ot.backends.torch` exists so far. Importing :mod:`mdsd_ot.backends` (or
:mod:`mdsd_ot.backends.torch`) does **not** import torch: every function imports it lazily and raises
``ImportError`` with the install hint ``pip install "mdsd_ot[torch]"`` when it is missing.
"""

TORCH_HINT = 'torch is required for this feature; install it with: pip install "mdsd_ot[torch]"'

__all__ = ["TORCH_HINT"]
