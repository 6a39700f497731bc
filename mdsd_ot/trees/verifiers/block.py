"""Block verification of one drafted chain (Sun et al., ICLR 2025; docs/math.md#block-verification)."""

from __future__ import annotations

import numpy as np

from ...drafts import get_scheme
from ...verifiers.base import sample_index
from .base import TreeVerifier, _add, _check_rng, _emission, capped_ratio, child_draft_laws

__all__ = ["BlockVerifier"]


# ------------------------------------------------------------------------------------------ block
class BlockVerifier(TreeVerifier):
    """Block verification of one drafted chain ``x_1..x_L`` (docs/math.md#block-verification).

    With ``p_0 = 1``, ``p_i = min(1, p_{i-1} P(x_i | x_<i) / Q(x_i | x_<i))``, residual masses
    ``Z_i = sum_y (p_i P(y | x_<=i) - Q(y | x_<=i))_+`` and stopping coins
    ``h_i = Z_i / (Z_i + 1 - p_i)`` (``i < L``), ``h_L = p_L``, ``h_0 = 1``: the call keeps
    ``x_1..x_tau`` for ``tau`` the last ``i`` whose coin succeeds and adds one token from
    ``norm(p_tau P(. | x_<=tau) - Q(. | x_<=tau))_+`` (from ``P(. | x_<=L)`` when ``tau = L``).
    ``P(tau = i) = h_i prod_{j > i} (1 - h_j)``; O(L V).

    ``Q`` is the law each drafted token was drawn from (:func:`child_draft_laws` with one child):
    ``q`` for every scheme but ``top_n``, whose chain drafts the argmax deterministically. ``p_i`` is
    formed by :func:`~mdsd_ot.trees.verifiers.base.capped_ratio` and ``Z_i`` as
    ``p_i sum (P - Q / p_i)_+``, so no ``p_{i-1} P`` underflows before its division.

    Examples
    --------
    Sun et al.'s example (V = 2, p = (1/3, 2/3), q = (2/3, 1/3) at every context): a drafted
    chain ``(0, 0)``:

    >>> import numpy as np
    >>> from mdsd_ot.trees import DraftTree
    >>> p, q = [1 / 3, 2 / 3], [2 / 3, 1 / 3]
    >>> t = DraftTree("1x2", "with_replacement", [-1, 0, 0], [-1, 0, 1], [q, q], [p, p, p])
    >>> round(BlockVerifier().expected_tokens(t), 6)
    1.5
    """

    name = "block"
    paper = (
        "Sun, Mendlovic, Leviathan, Aharoni, Beirami, Ro, Suresh. Block verification accelerates "
        "speculative decoding. ICLR 2025 (arXiv 2403.10444)"
    )

    def why_not(self, shape, scheme) -> str | None:
        from ..shape import parse_shape

        shape = parse_shape(shape)
        name = get_scheme(scheme).name
        if any(b != 1 for b in shape.branching):
            return f"block verification verifies one chain (shape 1xL), not {shape.label}; use 'traversal'"
        if name == "hub":
            return "hub drafts two children per node, a chain has one"
        return None

    def _coins(self, tree):
        """``(h, laws)``: the stopping coins ``h_0..h_L`` and, per ``i``, the law of the added token."""
        self.require(tree)
        L = tree.shape.depth
        P = tree.p
        # s[i]: the law node i's child x_{i+1} was drawn from (chain node i has depth i)
        s = [child_draft_laws(tree.scheme, tree.q[i], [int(tree.tokens[i + 1])])[0] for i in range(L)]
        ps = [1.0]
        for i in range(1, L + 1):  # p_{i-1} P / Q without forming an underflowing product first
            x = int(tree.tokens[i])
            ps.append(capped_ratio(ps[-1], float(P[i - 1][x]), float(s[i - 1][x])))
        h = np.empty(L + 1)
        laws = [None] * (L + 1)
        for i in range(L):
            if not ps[i] > 0.0:  # Z_i = 0: the coin never succeeds
                h[i], laws[i] = 0.0, P[i]
                continue
            # Z_i = p_i sum (P - Q / p_i)_+, factored like the traversal residual (base._reject_update)
            with np.errstate(over="ignore", under="ignore"):
                pos = np.maximum(P[i] - s[i] / ps[i], 0.0)
                D = float(np.maximum(s[i] - ps[i] * P[i], 0.0).sum())  # Z_i + 1 - p_i as a direct sum
            Z = float(pos.sum())
            if not D > 0.0:  # p_i P = Q: a branch of probability 0; any proper law will do
                h[i], laws[i] = 1.0, P[i]
            else:
                h[i], laws[i] = capped_ratio(ps[i], Z, D), (pos if Z > 0.0 else P[i])
        h[0] = 1.0  # p_0 = 1: Z_0 = D_0 in exact arithmetic; tau = 0 when no later coin succeeds
        h[L] = ps[L]
        laws[L] = P[L]
        return h, laws

    @staticmethod
    def _stop_probabilities(h: np.ndarray) -> np.ndarray:
        """``P(tau = i) = h_i prod_{j > i} (1 - h_j)``."""
        keep = np.ones(h.size)
        keep[:-1] = np.cumprod((1.0 - h[::-1])[:-1])[::-1]
        return h * keep

    def expected_tokens(self, tree) -> float:
        h, _ = self._coins(tree)
        pi = self._stop_probabilities(h)
        return float(np.dot(pi, np.arange(1, h.size + 1)))

    def outcome_law(self, tree) -> dict:
        h, laws = self._coins(tree)
        out: dict = {}
        for i, pr in enumerate(self._stop_probabilities(h)):
            if pr > 0.0:
                _add(out, _emission(tree, i, laws[i]), float(pr))
        return out

    def verify(self, tree, rng) -> list:
        _check_rng(rng)
        h, laws = self._coins(tree)
        tau = 0
        for i in range(h.size - 1, 0, -1):  # the last coin that succeeds, drawn from the end
            if rng.random() < h[i]:
                tau = i
                break
        return list(tree.path(tau)) + [sample_index(laws[tau], rng.random())]
