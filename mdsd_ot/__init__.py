"""mdsd_ot: optimal acceptance rates of multi-draft speculative decoding.

The optimal acceptance rate is the value of an optimal-transport problem between the target
distribution ``p`` and the law of the ``n`` drafts drawn from ``q``; its dual is a subset selection
solved exactly by sorting tokens by ``q/p``. See the README and ``docs/math.md`` for the mathematics.
"""

from . import _cli_startup  # noqa: F401  (first: a quiet Ctrl-C while the mdsd-ot command starts)
from .api import METHODS, optimal_acceptance, optimal_acceptance_batch
from .compare import Comparison, compare
from .drafts import SCHEMES, DraftScheme, get_scheme
from .logits import to_distribution
from .result import AcceptanceResult
from .top_k import TopKBounds, optimal_acceptance_top_k
from .verifiers import VERIFIERS, verifier_acceptance
from .warmup import warmup

__version__ = "0.1.0"

__all__ = [
    "optimal_acceptance",
    "optimal_acceptance_batch",
    "AcceptanceResult",
    "SCHEMES",
    "DraftScheme",
    "get_scheme",
    "METHODS",
    "VERIFIERS",
    "verifier_acceptance",
    "compare",
    "Comparison",
    "to_distribution",
    "warmup",
    "optimal_acceptance_top_k",
    "TopKBounds",
]
