"""Draft-tree shapes: the number of children of every node at each depth (docs/math.md#draft-trees).

A shape ``(b_1, ..., b_D)`` drafts ``b_1`` children of the root, ``b_2`` children of each of those, and
so on down to depth ``D``; the nodes at depth ``D`` are leaves. SpecTr's ``K`` drafts of length ``L``
are the chains ``(K, 1, ..., 1)`` (``L`` entries), written ``"KxL"``; EAGLE-style trees branch at
several depths, e.g. ``(4, 2, 2, 1)``, written ``"4,2,2,1"``.
"""

from __future__ import annotations

import numbers
import re
from dataclasses import dataclass

from .._config import MAX_TREE_NODES

__all__ = ["TreeShape", "parse_shape", "MAX_TREE_NODES"]


@dataclass(frozen=True)
class TreeShape:
    """Branching per depth of a draft tree.

    Attributes
    ----------
    branching : tuple of int
        ``branching[d]`` children for every node at depth ``d`` (the root is at depth 0).

    Examples
    --------
    >>> s = parse_shape("4x3")
    >>> s.branching, s.depth, s.size, s.label
    ((4, 1, 1), 3, 12, '4x3')
    >>> parse_shape("4,2,2,1").size
    44
    """

    branching: tuple

    def __post_init__(self):
        b = self.branching
        if isinstance(b, (str, bytes)) or not hasattr(b, "__iter__"):
            raise TypeError(f"branching must be a sequence of positive ints, got {b!r}")
        b = tuple(b)
        if not b:
            raise ValueError("a draft tree needs at least one depth (branching such as [2] or [4, 1, 1])")
        for k in b:
            if isinstance(k, bool) or not isinstance(k, numbers.Integral):
                raise TypeError(f"branching must hold ints, got {k!r} in {list(b)}")
            if k < 1:
                raise ValueError(f"every depth needs at least one child per node, got {list(b)}")
        b = tuple(int(k) for k in b)
        object.__setattr__(self, "branching", b)
        if self.size > MAX_TREE_NODES:
            raise ValueError(
                f"tree {list(b)} has more than MAX_TREE_NODES = {MAX_TREE_NODES:,} draft nodes (every "
                f"node is one position of the target's forward pass); use a smaller branching"
            )

    @property
    def depth(self) -> int:
        """Number of draft levels ``D`` (draft forward passes per target call)."""
        return len(self.branching)

    @property
    def level_sizes(self) -> tuple:
        """Nodes at depths ``1..D``: ``prod(b_1..b_d)``."""
        out, k = [], 1
        for b in self.branching:
            k *= b
            out.append(k)
        return tuple(out)

    @property
    def size(self) -> int:
        """Number of draft tokens (nodes below the root)."""
        total, k = 0, 1
        for b in self.branching:
            k *= b
            total += k
            if total > MAX_TREE_NODES:  # stop early: (10**6, 10**6, ...) must not build huge ints
                return total
        return total

    @property
    def is_chains(self) -> bool:
        """True for ``K`` independent chains: ``(K, 1, ..., 1)``."""
        return all(b == 1 for b in self.branching[1:])

    @property
    def label(self) -> str:
        """``"KxL"`` for chains, else the comma-separated branching."""
        if self.is_chains:
            return f"{self.branching[0]}x{self.depth}"
        return ",".join(map(str, self.branching))

    def __str__(self) -> str:
        return self.label


def parse_shape(spec) -> TreeShape:
    """A :class:`TreeShape` from ``"KxL"`` (chains), ``"b1,b2,..."``, a sequence of ints or a shape.

    Parameters
    ----------
    spec : str, int, sequence of int or TreeShape
        ``"KxL"`` (or ``"K*L"``), ``"b1,b2,..."`` (branching per depth), one int (a single level), a
        sequence of ints, or a :class:`TreeShape` (returned as is). ``ValueError`` for an unreadable
        string, ``TypeError`` for another type.

    Returns
    -------
    TreeShape

    >>> parse_shape("2x4").branching
    (2, 1, 1, 1)
    >>> parse_shape([4, 2, 2, 1]).label
    '4,2,2,1'
    """
    if isinstance(spec, TreeShape):
        return spec
    if isinstance(spec, str):
        text = spec.strip().lower().replace(" ", "")
        longest = max((len(d) for d in re.findall(r"\d+", text)), default=0)
        if longest > len(str(MAX_TREE_NODES)) + 1:  # never int() a 5,000-digit count
            raise ValueError(
                f"tree {spec[:40]!r}{'...' if len(spec) > 40 else ''} names a count of {longest:,} digits; "
                f"a tree holds at most MAX_TREE_NODES = {MAX_TREE_NODES:,} draft nodes"
            )
        m = re.fullmatch(r"(\d+)[x*](\d+)", text)
        if m:
            k, length = int(m.group(1)), int(m.group(2))
            if k < 1 or length < 1:
                raise ValueError(f"tree {spec!r}: K drafts x length L needs K >= 1 and L >= 1")
            if length > MAX_TREE_NODES:
                raise ValueError(f"tree {spec!r} is deeper than MAX_TREE_NODES = {MAX_TREE_NODES:,}")
            return TreeShape((k,) + (1,) * (length - 1))
        if re.fullmatch(r"\d+(,\d+)*", text):
            return TreeShape(tuple(int(x) for x in text.split(",")))
        raise ValueError(
            f"cannot read tree {spec!r}: write K drafts of length L as 'KxL' (e.g. '4x4') or the "
            f"branching per depth as comma-separated ints (e.g. '4,2,2,1')"
        )
    if isinstance(spec, numbers.Integral) and not isinstance(spec, bool):
        return TreeShape((int(spec),))
    try:
        return TreeShape(tuple(spec))
    except TypeError:
        raise TypeError(f"a tree shape is 'KxL', 'b1,b2,...' or a sequence of ints; got {spec!r}") from None
