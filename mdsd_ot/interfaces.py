"""What the two evaluation engines hand to the formulas that schemes and verifiers own.

A draft scheme's or a verifier's module holds its formula for every engine (``Verifier.plan``,
``Verifier.batch``, :func:`mdsd_ot.drafts.greedy.plan_bounds`); each formula receives the engine's
shared tables of one position (the evaluation plan, :mod:`mdsd_ot.plan`) or of a batch of rows (the
batched torch plan, :func:`mdsd_ot.backends.torch.evaluate_batch`). These protocols name everything a
formula may read there, so that an engine can change its internals without breaking a formula it
does not know about; ``tests/test_interfaces.py`` runs every registered formula on views that expose
only these names. A leaf module: it imports nothing from the package.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class PlanView(Protocol):
    """One validated, normalised position of the evaluation plan (:class:`mdsd_ot.plan._Plan`).

    Its arrays live in a per-thread workspace: a formula reads them and must not keep them.
    """

    #: Target and draft probabilities, float64, each summing to one.
    p: object
    q: object
    #: Vocabulary size.
    V: int
    #: True when p == q entry for entry (every bound and lossless verifier is then 1).
    same: bool

    @property
    def order(self):
        """Token indices along q/p, descending (ties by index)."""

    @property
    def rs(self):
        """q/p along :attr:`order` (``inf`` for p = 0 < q, 0 for q = 0)."""

    @property
    def held_top(self):
        """Every token of the top of q computed so far, in rank order (see :meth:`top`)."""

    def tables(self, *, wor2=False, rsd2=False):
        """The :class:`mdsd_ot.plan.PlanTables` along :attr:`order`."""

    def scans(self, ns):
        """``{n: (D, k)}``: the prefix scans of the with-replacement bound (and sequential n = 2)."""

    def top(self, k: int):
        """The ``k`` most likely tokens of q in rank order (ties by index)."""

    def rest_outside_top(self, n: int, tail: float) -> float:
        """The q mass outside the ``n - 1`` most likely tokens, given ``tail``, the mass outside
        :attr:`held_top`."""

    def greedy(self, ns):
        """``{n: (p(Top), sum min(p, q'), sum (p - q')_+, sum (q' - p)_+)}`` of the greedy family."""

    def naive(self, ns):
        """``{n: (accepted, rejected)}`` masses of the naive verifier with i.i.d. drafts."""


@runtime_checkable
class BatchView(Protocol):
    """The shared tensors of one batched torch plan call (:class:`mdsd_ot.backends.torch._Batch`),
    ``(B, V)`` float64 rows on one device."""

    #: Target and draft rows.
    pt: object
    qt: object

    @property
    def rows(self):
        """The rows along q/p, descending, with ``ps``, ``qs`` and the prefix sums ``P``, ``Q`` and
        suffix sums ``R`` of q (:class:`mdsd_ot.backends.torch._SortedRows`)."""

    @property
    def t(self):
        """p/q along that order, ascending (``inf`` where q = 0)."""

    def greedy(self):
        """``{n: (p(Top), sum min(p, q'), sum (p - q')_+, sum (q' - p)_+, p(argmax q))}``."""


def members(protocol) -> frozenset[str]:
    """The names a protocol exposes (its annotated attributes, properties and methods).

    Parameters
    ----------
    protocol : type
        :class:`PlanView` or :class:`BatchView`.

    Returns
    -------
    frozenset of str
    """
    names = set(getattr(protocol, "__annotations__", {}))
    names |= {name for name in vars(protocol) if not name.startswith("_")}
    return frozenset(names)
