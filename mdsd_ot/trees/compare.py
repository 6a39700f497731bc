"""Every valid tree verifier against the exact optimum over all valid tree verifiers.

:func:`compare_tree` is :func:`mdsd_ot.compare.compare` for draft trees: for one pair of models, a tree
shape and a draft scheme, the exact expected tokens per target call of every valid verifier (node-wise
and tree-level), averaged over every drafted tree, against :func:`mdsd_ot.trees.tree_optimum`, with
the gaps ``optimum - value`` and ``(optimum - value) / optimum``; and above the optimum, the mean of
every certified upper-bound rule (:func:`mdsd_ot.trees.upper_bound`, the ones a decoder computes on
each drafted tree at any vocabulary) with its excess over the optimum.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

from .._config import TREE_COMPARE_MAX_TREES, TREE_OPTIMUM_MAX_CLASSES, VALUE_TOL
from .bound import certified_rules, mean_upper_bound
from .enumerate import _positive_int, enumerate_trees
from .optimum import TreeOptimum, solve_tree_lp
from .shape import parse_shape
from .tree import canonical_verifier, expected_tokens, valid_verifiers
from .verifiers import TREE_VERIFIERS

__all__ = ["compare_tree", "TreeComparison", "TreeComparisonRecord"]


@dataclass(frozen=True)
class TreeComparisonRecord:
    """One verifier's exact tokens per call against the tree optimum.

    Attributes
    ----------
    verifier : str
        Registry name (``"lp"`` for the optimum's own verifier, evaluated like the others).
    kind : str
        ``"node-wise"`` (:data:`mdsd_ot.verifiers.VERIFIERS`), ``"tree-level"``
        (:data:`mdsd_ot.trees.TREE_VERIFIERS`) or ``"optimum"``.
    tokens : float
        Exact expected tokens per target call: ``sum over drafted trees of P(tree) expected_tokens(tree)``.
    gap : float
        ``optimum - tokens``.
    relative_gap : float
        ``gap / optimum``.
    """

    verifier: str
    kind: str
    tokens: float
    gap: float
    relative_gap: float


@dataclass(frozen=True)
class TreeComparison:
    """The table returned by :func:`compare_tree` (``str()`` a text table; :meth:`to_json` machine output).

    Iterating yields the records; ``table["rrs"]`` looks one up by verifier name. ``bounds`` holds
    ``(rule, mean)`` per certified upper-bound rule (:func:`mdsd_ot.trees.upper_bound`), each mean over
    every drafted tree at least :attr:`optimum`.
    """

    records: tuple
    skipped: tuple
    optimum: TreeOptimum
    shape: str
    scheme: str
    V: int
    n_ordered_trees: int
    bounds: tuple = ()

    def __iter__(self):
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, name: str) -> TreeComparisonRecord:
        for r in self.records:
            if r.verifier == name:
                return r
        raise KeyError(f"no record for verifier {name!r}; have {[r.verifier for r in self.records]}")

    def to_dicts(self) -> list:
        """One plain dict per record (JSON-serialisable)."""
        return [asdict(r) for r in self.records]

    def to_json(self, **kwargs) -> str:
        """``{"shape", "scheme", "V", "optimum", ..., "records": [...], "skipped": [...]}`` as JSON."""
        o = self.optimum
        payload = {
            "shape": self.shape,
            "scheme": self.scheme,
            "V": self.V,
            "optimum": o.value,
            "optimum_success": o.success,
            "optimum_message": o.message,
            "dual_bound": o.dual_bound,
            "tree_classes": o.n_trees,
            "ordered_trees": self.n_ordered_trees,
            "lp_variables": o.n_variables,
            "records": self.to_dicts(),
            "skipped": [{"verifier": n, "reason": why} for n, why in self.skipped],
            "upper_bounds": {rule: value for rule, value in self.bounds},
        }
        return json.dumps(payload, **kwargs)

    def __str__(self) -> str:
        o = self.optimum
        head = ["verifier", "kind", "tokens/call", "gap", "rel. gap"]
        rows = [
            [
                _display_name(r.verifier),
                r.kind,
                f"{r.tokens:.6f}",
                f"{_shown(r.gap):.6f}",
                f"{_shown(r.relative_gap):.2%}",
            ]
            for r in self.records
        ]
        widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(head)]

        def fmt(cells):
            return "  ".join(
                c.rjust(w) if i >= 2 else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
            )

        lines = [
            f"tree {_shape_text(self.shape)}, {self.scheme} drafts, V = {self.V} tokens: {o.n_trees:,} "
            f"path-set classes of {self.n_ordered_trees:,} drafted trees, causal LP of {o.n_variables:,} "
            "variables",
            f"optimum over all valid verifiers: {o.value:.9f} tokens per call; {o.message}",
            fmt(head),
            fmt(["-" * w for w in widths]),
        ]
        lines += [fmt(row) for row in rows]
        if any(r.verifier == "optimal" for r in self.records):
            lines.append(
                "optimal (one-step): the node-wise verifier that is optimal for one step at each node, "
                "not the tree optimum (the lp row)"
            )
        lines += [f"skipped {name}: {why}" for name, why in self.skipped]
        if self.bounds:
            lines.append(
                "certified upper bounds, mean over the drafted trees of each rule's per-tree value "
                "(docs/math.md#the-tree-dual):"
            )
            lines += [
                f"  {rule:<10}  {value:.6f}  (+{_shown(value - o.value) / o.value:.2%} over the optimum)"
                for rule, value in self.bounds
            ]
        return "\n".join(line.rstrip() for line in lines)


def _display_name(verifier: str) -> str:
    """The name a table shows: the node-wise ``optimal`` reads as the tree optimum otherwise."""
    return "optimal (one-step)" if verifier == "optimal" else verifier


def _shape_text(label: str) -> str:
    """``2x2 (branching 2,1: 2 chains of 2 draft tokens)``: a shape label with what it means (a
    chain shape given as ``2,1`` is labelled ``2x2``)."""
    shape = parse_shape(label)
    branching = ",".join(map(str, shape.branching))
    if shape.is_chains and shape.depth > 1:
        k = shape.branching[0]
        return (
            f"{label} (branching {branching}: {k} chain{'' if k == 1 else 's'} of {shape.depth} draft tokens)"
        )
    return f"{label} ({shape.size:,} draft node{'' if shape.size == 1 else 's'})"


def _shown(x: float) -> float:
    """Rounding noise below the printed precision is shown as 0, not -0."""
    return 0.0 if abs(x) < 5e-10 else x


def compare_tree(
    target,
    draft,
    shape,
    scheme,
    *,
    context=(),
    verifiers=None,
    max_classes: int = TREE_OPTIMUM_MAX_CLASSES,
    max_trees: int = TREE_COMPARE_MAX_TREES,
) -> TreeComparison:
    """Exact tokens per call of every valid verifier against :func:`~mdsd_ot.trees.tree_optimum`.

    .. math:: \\text{value}(v) = \\sum_T P(T)\\, \\mathbb{E}[|E| \\mid T, v], \\qquad
              \\text{gap} = \\text{OPT} - \\text{value}(v)

    over every ordered drafted tree ``T`` (:meth:`TreeEnumeration.trees`), each value from
    :func:`mdsd_ot.trees.expected_tokens` (exact given the tree). The optimum's own ``lp`` verifier is
    evaluated the same way as a check (its row has gap 0 to ``VALUE_TOL``). A verifier whose value
    exceeds the optimum by more than ``VALUE_TOL`` is an internal error (``RuntimeError``), never a
    negative gap.

    Parameters
    ----------
    target, draft, shape, scheme, context
        As in :func:`mdsd_ot.trees.tree_optimum`.
    verifiers : sequence of str, str or None
        Node-wise or tree-level names (a comma-separated string is accepted); default every verifier
        valid for ``scheme`` and ``shape`` (:func:`mdsd_ot.trees.valid_verifiers`). A named verifier that
        cannot verify these trees is a ``ValueError``.
    max_classes, max_trees : int
        Refuse more path-set classes (the LP) or ordered trees (the evaluation) than these.

    Returns
    -------
    TreeComparison

    Examples
    --------
    >>> t = compare_tree(lambda c: [1/3, 2/3], lambda c: [2/3, 1/3], "1x2", "with_replacement",
    ...                  verifiers="rrs,block")
    >>> [(r.verifier, round(9 * r.tokens, 9)) for r in t], round(9 * t.optimum.value, 9)
    ([('rrs', 19.0), ('block', 20.0), ('lp', 20.0)], 20.0)
    """
    max_trees = _positive_int(max_trees, "max_trees", low=1)
    e = enumerate_trees(target, draft, shape, scheme, context=context, max_classes=max_classes)
    if verifiers is None:
        names = valid_verifiers(e.scheme, shape=e.shape)
    else:
        if isinstance(verifiers, str):
            verifiers = [v.strip() for v in verifiers.split(",") if v.strip()]
        names = list(dict.fromkeys(canonical_verifier(v) for v in verifiers))
        if not names:
            raise ValueError("no verifiers given; name at least one (or pass None for every valid one)")
        valid = valid_verifiers(e.scheme, names, shape=e.shape)
        bad = [n for n in names if n not in valid]
        if bad:
            why = [
                TREE_VERIFIERS[n].why_not(e.shape, e.scheme.name) if n in TREE_VERIFIERS else None
                for n in bad
            ]
            raise ValueError(
                f"{bad} cannot verify {e.shape.label} trees of {e.scheme.name!r} drafts"
                + "".join(f"; {n}: {w}" for n, w in zip(bad, why) if w)
            )
    n_ordered = e.n_trees()
    if n_ordered > max_trees:
        raise ValueError(
            f"{n_ordered:,} ordered drafted trees of shape {e.shape.label} under {e.scheme.name!r} at "
            f"V = {e.vocab} (limit {max_trees:,}, TREE_COMPARE_MAX_TREES); use a smaller vocabulary or a "
            f"shape with fewer nodes"
        )
    opt = solve_tree_lp(e)
    if not opt.success:
        raise RuntimeError(f"internal error: the tree optimum failed its re-check: {opt.message}")
    terms: dict = {n: [] for n in names + ["lp"]}
    skipped: list = []
    for tree, prob in e.trees(max_trees=max_trees):
        for n in list(terms):
            verifier = opt.verifier if n == "lp" else n
            try:
                terms[n].append(prob * expected_tokens(tree, verifier))
            except ValueError as exc:
                if verifiers is not None or n == "lp":
                    raise
                skipped.append((n, " ".join(str(exc).split())))
                del terms[n]
    records = []
    for n, t in terms.items():
        value = math.fsum(t)
        gap = opt.value - value
        if gap < -VALUE_TOL:
            raise RuntimeError(
                f"internal error: verifier {n!r} emits {value:.15g} tokens per call on {e.shape.label} trees "
                f"of {e.scheme.name!r} drafts, above the proven optimum {opt.value:.15g}; please report this"
            )
        if n == "lp" and gap > VALUE_TOL:
            raise RuntimeError(
                f"internal error: the lp verifier evaluated tree by tree gives {value:.15g}, not the "
                f"optimum {opt.value:.15g}; please report this"
            )
        kind = "optimum" if n == "lp" else ("tree-level" if n in TREE_VERIFIERS else "node-wise")
        records.append(TreeComparisonRecord(n, kind, value, gap, gap / opt.value))
    bounds = []
    for rule in certified_rules(e.scheme):
        value = mean_upper_bound(e, rule)
        if value < opt.value - VALUE_TOL:
            raise RuntimeError(
                f"internal error: the {rule!r} upper bound averages {value:.15g} on {e.shape.label} trees of "
                f"{e.scheme.name!r} drafts, below the proven optimum {opt.value:.15g}; please report this"
            )
        bounds.append((rule, value))
    return TreeComparison(
        tuple(records), tuple(skipped), opt, e.shape.label, e.scheme.name, e.vocab, n_ordered, tuple(bounds)
    )
