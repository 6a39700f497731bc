"""Row keys: the one place that builds and parses the flat keys of a stored row.

A study row (and :meth:`mdsd_ot.plan.PositionEvaluation.row`, the torch plan's batch, the summaries)
names each value by a flat string key:

* ``"bound:<scheme>@<n>"`` -- alpha* of draft scheme ``<scheme>`` with ``n`` drafts;
* ``"verifier:<name>@<n>"`` -- the acceptance of registry verifier ``<name>`` with ``n`` drafts;
* ``"<key>:se"`` -- the Monte Carlo standard error of a verifier value (present when > 0);
* a *method* is a key without its ``@<n>``: ``"bound:<scheme>"``, ``"verifier:<name>"``, and in the
  summaries ``"gap:<name>"`` (the bound of the verifier's scheme minus its acceptance) and, in decode
  tables, ``"exact:<name>"``;
* in decode rows, ``"upper:<rule>"`` -- one call's value of the tree-dual rule ``<rule>``
  (:func:`mdsd_ot.trees.upper_bound`), whose mean over calls is a certified upper bound on the tokens
  per call of every valid verifier (not ``"bound"``, the node-alpha* heuristic of older rows).

Also here, because a row needs them to pair a verifier with its bound: :func:`verifier_scheme` (the
bound a verifier is compared with) and :func:`verifier_applies` (whether a verifier is defined for
``n`` drafts). Imports nothing above the registries (``mdsd_ot.drafts``, ``mdsd_ot.verifiers``), and
those only inside the functions.

>>> bound_key("greedy", 3), verifier_key("rrs", 2), se_key(verifier_key("rrs", 2))
('bound:greedy@3', 'verifier:rrs@2', 'verifier:rrs@2:se')
>>> parse_key("bound:without_replacement@4"), split_method("gap:spectr")
(('bound', 'without_replacement', 4), ('gap', 'spectr'))
"""

from __future__ import annotations

__all__ = [
    "BOUND",
    "VERIFIER",
    "GAP",
    "EXACT",
    "UPPER",
    "SE_SUFFIX",
    "bound_key",
    "verifier_key",
    "se_key",
    "exact_key",
    "is_exact",
    "upper_key",
    "is_upper",
    "key_of",
    "method_key",
    "split_key",
    "parse_key",
    "split_method",
    "is_value_key",
    "is_bound",
    "is_verifier",
    "is_gap",
    "verifier_scheme",
    "bound_key_of_verifier",
    "verifier_applies",
]

#: The kinds of method a key can name (the text before the first ``:``).
BOUND, VERIFIER, GAP, EXACT, UPPER = "bound", "verifier", "gap", "exact", "upper"

#: Suffix of the Monte Carlo standard error of a value key.
SE_SUFFIX = ":se"


def method_key(kind: str, name: str) -> str:
    """``"<kind>:<name>"``, e.g. ``method_key("gap", "rrs") == "gap:rrs"``.

    Parameters
    ----------
    kind : str
        ``"bound"``, ``"verifier"``, ``"gap"`` or ``"exact"``.
    name : str
        Scheme or verifier name.

    Returns
    -------
    str
    """
    return f"{kind}:{name}"


def key_of(method: str, n) -> str:
    """The value key of ``method`` (``"bound:<scheme>"`` or ``"verifier:<name>"``) at ``n`` drafts.

    Parameters
    ----------
    method : str
        A method (a key without its ``@<n>``).
    n : int or str
        Number of drafts.

    Returns
    -------
    str
    """
    return f"{method}@{n}"


def bound_key(scheme: str, n) -> str:
    """``"bound:<scheme>@<n>"``.

    Parameters
    ----------
    scheme : str
        Draft scheme name.
    n : int or str
        Number of drafts.

    Returns
    -------
    str
    """
    return f"bound:{scheme}@{n}"


def verifier_key(name: str, n) -> str:
    """``"verifier:<name>@<n>"``.

    Parameters
    ----------
    name : str
        Registry verifier name.
    n : int or str
        Number of drafts.

    Returns
    -------
    str
    """
    return f"verifier:{name}@{n}"


def exact_key(name: str) -> str:
    """``"exact:<name>"``: a decode row's exact expected tokens per call of tree verifier ``name``.

    Parameters
    ----------
    name : str
        Tree verifier name.

    Returns
    -------
    str
    """
    return f"exact:{name}"


def is_exact(key: str) -> bool:
    """Whether a decode key or method is an exact tree value (``"exact:..."``).

    Parameters
    ----------
    key : str
        A key or method.

    Returns
    -------
    bool
    """
    return key.startswith("exact:")


def upper_key(rule: str) -> str:
    """``"upper:<rule>"``: a decode row's per-call value of tree-dual rule ``rule``
    (:func:`mdsd_ot.trees.upper_bound`; its mean over calls is the certified bound).

    Parameters
    ----------
    rule : str
        Rule name (:data:`mdsd_ot.trees.RULES`).

    Returns
    -------
    str

    >>> upper_key("subtree")
    'upper:subtree'
    """
    return f"upper:{rule}"


def is_upper(key: str) -> bool:
    """Whether a decode key or method is a tree-dual upper-bound value (``"upper:..."``).

    Parameters
    ----------
    key : str
        A key or method.

    Returns
    -------
    bool
    """
    return key.startswith("upper:")


def se_key(key: str) -> str:
    """The standard-error key of value key ``key``: ``key + ":se"``.

    Parameters
    ----------
    key : str
        A value key.

    Returns
    -------
    str
    """
    return key + SE_SUFFIX


def split_key(key: str) -> tuple[str, str]:
    """``(method, n)`` of a value key, ``n`` as the text after the last ``@``
    (``"verifier:rrs@2"`` -> ``("verifier:rrs", "2")``).

    Parameters
    ----------
    key : str
        A value key; ``ValueError`` if it has no ``@``.

    Returns
    -------
    tuple of (str, str)
    """
    method, n = key.rsplit("@", 1)
    return method, n


def parse_key(key: str) -> tuple[str, str, int]:
    """``(kind, name, n)`` of a value key ``"<kind>:<name>@<n>"`` (``ValueError`` for another key).

    Parameters
    ----------
    key : str
        A value key.

    Returns
    -------
    tuple of (str, str, int)
    """
    method, sep, n = key.rpartition("@")
    kind, colon, name = method.partition(":")
    if not (sep and colon and n.isdigit()):
        raise ValueError(f"not a row value key '<kind>:<name>@<n>': {key!r}")
    return kind, name, int(n)


def split_method(method: str) -> tuple[str, str]:
    """``(kind, name)`` of a method ``"<kind>:<name>"``.

    Parameters
    ----------
    method : str
        A method; ``ValueError`` if it has no ``:``.

    Returns
    -------
    tuple of (str, str)
    """
    kind, name = method.split(":", 1)
    return kind, name


def is_bound(key: str) -> bool:
    """Whether a key or method is a bound (``"bound:..."``).

    Parameters
    ----------
    key : str
        A key or method.

    Returns
    -------
    bool
    """
    return key.startswith("bound:")


def is_verifier(key: str) -> bool:
    """Whether a key or method is a verifier value (``"verifier:..."``).

    Parameters
    ----------
    key : str
        A key or method.

    Returns
    -------
    bool
    """
    return key.startswith("verifier:")


def is_gap(key: str) -> bool:
    """Whether a method is a gap (``"gap:..."``).

    Parameters
    ----------
    key : str
        A method.

    Returns
    -------
    bool
    """
    return key.startswith("gap:")


def is_value_key(key: str) -> bool:
    """Whether ``key`` of a row holds a bound or a verifier value (not a standard error, not a
    field such as ``record``, ``pos``, ``T`` or ``errors``).

    Parameters
    ----------
    key : str
        A row key.

    Returns
    -------
    bool
    """
    return (is_bound(key) or is_verifier(key)) and not key.endswith(SE_SUFFIX)


def verifier_scheme(name: str) -> str:
    """The bound (a registered draft scheme) that verifier ``name`` should be compared with: the
    scheme it is built for (``mdsd_ot.VERIFIERS[name].scheme``), or the scheme with the same draft-set
    law (``DraftScheme.same_sets_as``: SpecHub's hub drafts are greedy drafts for n = 2).
    ``KeyError`` for a name outside the registry.

    Parameters
    ----------
    name : str
        Registry verifier name.

    Returns
    -------
    str
        The draft scheme name.
    """
    from .drafts import get_scheme
    from .verifiers import VERIFIERS

    scheme = get_scheme(VERIFIERS[name].scheme)
    return scheme.same_sets_as or scheme.name


def bound_key_of_verifier(name: str, n) -> str:
    """The bound key a verifier value is compared with: ``bound_key(verifier_scheme(name), n)``.

    Parameters
    ----------
    name : str
        Registry verifier name (``KeyError`` outside the registry).
    n : int or str
        Number of drafts.

    Returns
    -------
    str
    """
    return bound_key(verifier_scheme(name), n)


def verifier_applies(name: str, n: int) -> bool:
    """Whether registry verifier ``name`` is defined for ``n`` drafts (its ``fixed_n``, if any).

    Parameters
    ----------
    name : str
        Registry verifier name (``KeyError`` outside the registry).
    n : int
        Number of drafts.

    Returns
    -------
    bool
    """
    from .verifiers import VERIFIERS

    fixed = VERIFIERS[name].fixed_n
    return fixed is None or fixed == n
