"""Recursive rejection sampling (RRS) with i.i.d. drafts.

Reference: Miao et al., "SpecInfer: Accelerating Large Language Model Serving with Tree-based
Speculative Inference and Verification", ASPLOS 2024, arXiv:2305.09781 (multi-step speculative
sampling). docs/math.md#rrs.

Start with ``r_1 = p``. For draft ``i = 1..n`` (in order; repeated tokens are processed again): accept
``x_i`` with probability ``min(1, r_i(x_i) / q(x_i))``; on rejection move to the residual
``r_{i+1} = (r_i - q)_+ / sum (r_i - q)_+`` -- the same update whichever token was rejected. If every
draft is rejected, sample from ``r_{n+1}``. Because the update does not depend on the rejected token,
the residual chain is computed once per ``(p, q)`` (lazily, up to the draft index needed).

.. math:: \\alpha = 1 - \\prod_{i=1}^n \\bigl(1 - \\beta(r_i, q)\\bigr),
          \\qquad 1 - \\beta(r_i, q) = \\sum_y (r_i(y) - q(y))_+

**Any n in O(V log V).** With ``t = p/q`` (``+inf`` where ``q = 0``) and
``E(theta) = sum_y (p(y) - theta q(y))_+``, induction gives ``r_i = (p - theta_i q)_+ / E(theta_i)`` with
``theta_1 = 0`` and ``theta_{i+1} = theta_i + E(theta_i)`` (subtracting ``q`` from
``(p - theta q)_+ / E`` and taking the positive part is ``(p - (theta + E) q)_+ / E``). So the product
telescopes: ``prod_{i<=n} (1 - beta(r_i, q)) = E(theta_{n+1}) / E(theta_1)`` (:func:`rrs_rejection`).
While the support ``A = {t > theta}`` does not change, ``E`` is affine, ``E(theta) = p(A) - theta q(A)``,
and each step multiplies it by ``1 - q(A)``; the support only shrinks, once per distinct ratio, so the
steps between changes are jumped in closed form: O(V) jumps for any ``n``.
"""

from __future__ import annotations

import numpy as np

from .._config import RRS_MAX_CHAIN_ENTRIES
from .._validate import distinct_ns
from ..backends._tensor import require_torch
from .base import (
    BatchVerifier,
    PlanVerifier,
    PreparedVerifier,
    Verifier,
    accept_ratio,
    residual,
    sample_drafts_batch,
    sample_index,
)

__all__ = ["SpecInferVerifier", "rrs_rejection", "rrs_chain"]


def rrs_rejection(p: np.ndarray, q: np.ndarray, n: int) -> float:
    """P(all ``n`` RRS steps reject) ``= E(theta_{n+1}) / E(theta_1)`` (module docstring), any ``n``.

    Tokens with ``p > 0`` are sorted by ``t = p/q`` (decreasing); with prefix sums ``P_j``, ``Q_j`` of the
    ``j`` largest ratios, ``E(theta) = P_j - theta Q_j`` for ``j = #{t > theta}``. One step is
    ``theta += E(theta)``. While ``j`` stays the same, ``E`` is multiplied by ``1 - Q_j`` per step and
    ``theta`` moves towards the fixed point ``P_j / Q_j`` (the q-weighted mean of those ratios, which is
    above the smallest of them unless they are all equal): the number of steps before ``theta`` passes
    the smallest ratio ``t_j`` is computed in closed form and jumped over, stopping one step short so
    that the crossing step itself is taken explicitly. ``j`` decreases at most once per distinct ratio,
    so there are O(V) explicit steps and jumps whatever ``n`` is. ``Q_j = 0`` (only ``q = 0`` tokens
    left) is the fixed point ``1 - beta = 1``: the product no longer changes. Rounding: ``E`` has
    absolute error ~eps (``P_j`` and ``theta Q_j`` are at most ~1), and the recursion contracts
    errors in ``theta`` by ``1 - Q_j`` per step, so the result is exact to a few eps in absolute terms.

    Complexity O(V log V) (the sort) plus O(V log V) for the steps, independent of ``n``.

    Parameters
    ----------
    p, q : numpy.ndarray, shape (V,)
        Validated, normalised target and draft laws.
    n : int
        Number of drafts (>= 1).

    Returns
    -------
    float
    """
    pos = p > 0
    pp, qq = p[pos], q[pos]
    with np.errstate(divide="ignore", over="ignore"):  # q = 0 or subnormal q: +inf, above every theta
        t = pp / qq  # +inf where q = 0
    order = np.argsort(-t, kind="stable")
    t, pp, qq = t[order], pp[order], qq[order]
    P = np.concatenate([[0.0], np.cumsum(pp)])
    Q = np.concatenate([[0.0], np.cumsum(qq)])
    return rrs_chain(t, P, Q, [n])[0]


def rrs_chain(t: np.ndarray, P: np.ndarray, Q: np.ndarray, ns) -> list:
    """P(all ``n`` RRS steps reject) for every ``n`` of ``ns``, along one run of the chain.

    ``t`` holds the ratios ``p/q`` of the tokens with ``p > 0`` in decreasing order (``+inf`` where
    ``q = 0``), ``P`` and ``Q`` the prefix sums of ``p`` and ``q`` in that order (length ``t.size + 1``);
    :func:`rrs_rejection` builds them, and an evaluation plan (:mod:`mdsd_ot.plan`) reads them off its
    one sort. The steps and jumps are those described in :func:`rrs_rejection`; a jump never passes
    a requested ``n``, so every one of them is read off the same run.

    Parameters
    ----------
    t : numpy.ndarray, shape (K,)
        Ratios ``p/q`` in decreasing order.
    P, Q : numpy.ndarray, shape (K + 1,)
        Prefix sums of ``p`` and ``q`` in that order (starting at 0).
    ns : iterable of int
        Numbers of drafts.

    Returns
    -------
    list of float
        One per entry of ``ns``, in that order.
    """
    targets = sorted({int(n) for n in ns})
    found = {}
    neg_t = -t  # increasing: #{t > theta} = searchsorted(-t, -theta, 'left')
    total = float(P[-1])  # E(theta_1) = E(0) = sum(p)
    theta, E, j, k = 0.0, total, t.size, 0
    for n in targets:
        while k < n:
            theta = theta + E  # one explicit step
            j_new = int(np.searchsorted(neg_t, -theta, side="left"))
            E = max(float(P[j_new] - theta * Q[j_new]), 0.0)
            k += 1
            if E <= 0.0 or k >= n:
                j = j_new
                break
            if j_new == j:  # the support did not change in this step: jump while it stays the same
                Qj = float(Q[j])
                if Qj <= 0.0:
                    k = n  # only q = 0 tokens left: every later step rejects with probability 1
                    break
                log_keep = np.log1p(-Qj) if Qj < 1.0 else -np.inf  # log(1 - Q_j) per step
                # theta after s more steps: theta + E (1 - (1 - Q)^s) / Q; it reaches t_j when
                # (1 - Q)^s <= g = 1 - (t_j - theta) Q / E (g <= 0: never, all ratios in A equal)
                g = 1.0 - (float(t[j - 1]) - theta) * Qj / E
                if g <= 0.0 or log_keep == -np.inf:
                    s = n - k
                else:
                    s = min(n - k, max(int(np.log(g) / log_keep) - 1, 0))  # one short of the crossing
                if s > 0:
                    decay = s * log_keep  # log((1 - Q)^s)
                    theta = theta + E * float(-np.expm1(decay)) / Qj
                    E = E * float(np.exp(decay))
                    k += s
            j = j_new
        if E <= 0.0:
            k = max(k, n)  # every later step accepts: the rejection stays 0
        found[n] = min(E / total, 1.0) if total > 0.0 else 0.0
    return [found[int(n)] for n in ns]


class _PreparedRRS(PreparedVerifier):
    def __init__(self, verifier, p, q, n, scheme):
        super().__init__(verifier, p, q, n, scheme)
        self.chain = [p]  # r_1, r_2, ...: extended on demand by _r, up to its fixed point
        self._fixed = False

    def _r(self, i: int) -> np.ndarray:
        """``r_{i+1}`` (0-based), extending the cached chain as needed.

        The chain stops growing at a fixed point: ``residual`` is a deterministic function of
        ``(r, q)``, so once ``r_{k+1} == r_k`` bit for bit every later residual equals ``r_k``. That
        covers a zero rejection mass (``residual`` then returns ``r`` itself: the branch has probability
        zero), a one-hot ``r`` and an ``r`` supported on ``q = 0`` tokens; so for huge ``n`` the chain is
        usually short. A chain that keeps changing is bounded by ``RRS_MAX_CHAIN_ENTRIES`` floats.
        """
        chain = self.chain
        while len(chain) <= i and not self._fixed:
            if (len(chain) + 1) * self.p.size > RRS_MAX_CHAIN_ENTRIES:
                raise ValueError(
                    f"the RRS residual chain for {i + 1} drafts over V={self.p.size} tokens would hold more "
                    f"than RRS_MAX_CHAIN_ENTRIES = {RRS_MAX_CHAIN_ENTRIES:,} floats; use fewer drafts "
                    f"(the exact acceptance needs no chain)"
                )
            nxt, _ = residual(chain[-1], self.q)
            if np.array_equal(nxt, chain[-1]):
                self._fixed = True
            else:
                chain.append(nxt)
        return chain[min(i, len(chain) - 1)]

    def _ratio(self, i, x):
        return accept_ratio(self._r(i)[x], self.q[x])

    def _verify(self, drafts, rng):
        for i, x in enumerate(drafts):
            if rng.random() < self._ratio(i, x):
                return int(x)
        return sample_index(self._r(len(drafts)), rng.random())

    def _law(self, drafts):
        law = np.zeros(self.p.size)
        alive = 1.0
        for i, x in enumerate(drafts):
            a = self._ratio(i, x)
            law[x] += alive * a
            alive *= 1.0 - a
        law += alive * self._r(len(drafts))
        return law

    def accept_probability(self, drafts):
        """``1 - prod_i (1 - min(1, r_i(x_i) / q(x_i)))``, O(n): the residual is 0 on rejected drafts."""
        x = self.check_drafts(drafts)
        alive = 1.0
        for i, xi in enumerate(x):
            alive *= 1.0 - self._ratio(i, xi)
        return 1.0 - alive

    def monte_carlo(self, samples: int, rng: np.random.Generator) -> np.ndarray:
        """:meth:`accept_probability` of ``samples`` sampled draft tuples, vectorised over the samples
        (the same operations in the same order as the per-tuple loop)."""
        drafts = sample_drafts_batch(self.scheme, self.q, self.n, samples, rng)
        alive = np.ones(samples)
        for i in range(self.n):
            x = drafts[:, i]
            alive *= 1.0 - accept_ratio(self._r(i)[x], self.q[x])
        return 1.0 - alive

    def acceptance(self):
        """``1 - prod_i sum_y (r_i - q)_+`` by :func:`rrs_rejection`: O(V log V) for any ``n``."""
        return float(1.0 - rrs_rejection(self.p, self.q, self.n))


# -- the same acceptance in the evaluation plan (mdsd_ot.plan; its numba passes in _kernels/plan.py)
def _plan_acceptance(plan, ns):
    from .._kernels import plan as plan_kernels

    t = plan.tables()
    targets = distinct_ns(ns)
    rej = dict(zip(targets.tolist(), plan_kernels.rrs_chain_order(plan.rs, t.ps, t.qs, t.Ps, t.R, targets)))
    return [1.0 - float(rej[n]) for n in ns]


# -- ... and in the batched torch plan (mdsd_ot.backends.torch.evaluate_batch), on the tensors' device
def _batch_acceptance(b, ns):
    return {n: 1.0 - rej for n, rej in _torch_rrs(b.t, b.rows.P, b.rows.Q, ns).items()}


def _torch_rrs(t, P, Q, ns):
    """RRS rejection for every n (docs/math.md#rrs): ``theta += E(theta)`` step by step, with
    ``E(theta) = p(t > theta) - theta q(t > theta)`` from suffix sums (a batched search per step)."""
    torch = require_torch()
    total_p, total_q = P[:, -1:], Q[:, -1:]
    theta = torch.zeros_like(total_p)
    E = total_p.clone()
    out = {}
    for k in range(1, max(ns) + 1):
        theta = theta + E
        j = torch.searchsorted(t, theta, right=True)  # tokens with t <= theta
        pj = total_p - torch.gather(P, -1, j)
        qj = total_q - torch.gather(Q, -1, j)
        E = torch.where(E > 0, (pj - theta * qj).clamp(min=0.0), E)
        if k in ns:
            out[k] = (E / total_p).clamp(max=1.0).squeeze(-1)
    return out


class SpecInferVerifier(Verifier):
    """SpecInfer's recursive rejection sampling for i.i.d. drafts (registry name ``"rrs"``).

    Examples
    --------
    >>> from mdsd_ot.verifiers import VERIFIERS
    >>> round(VERIFIERS["rrs"].acceptance([0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4], 2), 6)
    0.65
    """

    name = "rrs"
    plan = PlanVerifier(lambda n: True, _plan_acceptance)
    batch = BatchVerifier(lambda n: True, _batch_acceptance)
    schemes = ("with_replacement",)
    reference = "Miao et al., SpecInfer, ASPLOS 2024, arXiv:2305.09781"

    def _prepare(self, p, q, n, scheme):
        return _PreparedRRS(self, p, q, n, scheme)
