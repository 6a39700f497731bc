"""Tree-level verifiers: verify a whole drafted chain or tree at once, not node by node.

docs/math.md#tree-level-verification. A node-wise verifier (:data:`mdsd_ot.verifiers.VERIFIERS`)
decides at each node from that node's ``(p_v, q_v)`` and children alone; a tree-level verifier sees
the whole drafted tree (every ``p_v``, ``q_v`` and token) and decides which root-to-node path to keep
and which token to add after it. One module per verifier (:mod:`.block`, :mod:`.traversal`,
:mod:`.gbv`), the shared parts in :mod:`.base`. Registry :data:`TREE_VERIFIERS`:

=============  ==================================  ================================================
name           trees                               method
=============  ==================================  ================================================
``block``      chains ``1xL``, every scheme that   block verification (Sun, Mendlovic, Leviathan,
               drafts one child (all but ``hub``)  Aharoni, Beirami, Ro, Suresh, ICLR 2025)
``traversal``  every shape; every scheme but       traversal verification (Weng et al., NeurIPS
               ``conditional_poisson`` with more   2025), leaf to root with sequence-level
               than one child                      acceptance; equals ``block`` on chains
``gbv``        ``KxL`` chains of i.i.d. drafts     greedy multi-path block verification (Thomas &
               (``with_replacement``); ``1xL``     Pal, 2026): block verification of the highest
               under every scheme ``block``        drafted path with the law of the highest of K
               accepts                             i.i.d. paths; equals ``block`` at K = 1
=============  ==================================  ================================================

Each computes, from one drafted tree, the exact law of the tokens one call emits
(:meth:`TreeVerifier.outcome_law`) and its exact expected length (:meth:`TreeVerifier.expected_tokens`)
in O(N V) numpy passes (``N`` nodes, ``V`` tokens), and samples a call (:meth:`TreeVerifier.verify`).
:func:`mdsd_ot.trees.expected_tokens`, :func:`~mdsd_ot.trees.outcome_law` and
:func:`~mdsd_ot.trees.verify_tree` accept these names, or any :class:`TreeVerifier` instance, wherever
they accept a node-wise verifier name.

**The draft law of each child.** Both algorithms need, for the ``k``-th child of a node, the law its
token was drawn from given the tokens of its elder siblings (:func:`child_draft_laws`): ``q`` for
i.i.d. drafts; ``q`` without the elder siblings' tokens, renormalised, for sequential drafts without
replacement; a point mass on the ``k``-th most likely token for ``top_n``; point masses on the top
``n - 1`` tokens and ``q`` on the rest for ``greedy``; ``q`` then, for ``hub``, the hub token (or ``q``
without it when the first draft was the hub). With one child per node every scheme but ``top_n``
drafts from ``q`` itself, and ``top_n`` from the point mass on the argmax: block verification is valid
whenever the verifier uses the law the token was actually drawn from, so it accepts deterministic
drafts too (docs/math.md#block-verification).
"""

from __future__ import annotations

from .base import TreeVerifier, child_draft_laws
from .block import BlockVerifier
from .gbv import GBVVerifier
from .traversal import TraversalVerifier

__all__ = [
    "TreeVerifier",
    "BlockVerifier",
    "TraversalVerifier",
    "GBVVerifier",
    "TREE_VERIFIERS",
    "child_draft_laws",
]

#: name -> tree-level verifier (docs/math.md#tree-level-verification).
TREE_VERIFIERS: dict[str, TreeVerifier] = {
    v.name: v for v in (BlockVerifier(), TraversalVerifier(), GBVVerifier())
}
