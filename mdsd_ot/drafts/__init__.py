"""Draft-sampling schemes: how the n drafts are drawn from the draft distribution q.

Each scheme can draw drafts with a :class:`numpy.random.Generator`, enumerate its exact law over
ordered draft tuples (small vocabularies; the test oracle), and evaluate

.. math:: Q(H) = \\Pr[\\text{every draft lies in } H]

for an arbitrary token subset ``H`` (docs/math.md#draft-schemes). The dual solver (:mod:`mdsd_ot.dual`) only
needs ``Q`` along sorted prefixes; :meth:`DraftScheme.mass` is the independent, subset-at-a-time
evaluation used to re-check its certificates.

One module per scheme owns its formulas in every engine (numpy here, the torch twin beside it, and
names its numba kernel family), and builds its :class:`DraftScheme`; this package collects them
into :data:`SCHEMES`. Adding a scheme is one module plus one line below (CONTRIBUTING.md).

Masses "outside a set" (``1 - q(S)``) are always computed as direct sums over the complement, never by
subtraction from one: near one-hot drafts (``q_max = 1 - 1e-12``) would otherwise lose every digit.

Schemes
-------
``with_replacement``      i.i.d. drafts, ``Q(H) = q(H)^n``.
``without_replacement``   sequential draws without replacement (draw, remove, renormalise; the law
                          of Gumbel-top-n in draw order), ``Q(H) = W_n(H)``.
``greedy``                the n-1 most likely tokens (ties by index) plus one draw from q restricted
                          to the others (Hu et al., 2025).
``hub``                   SpecHub's n = 2 drafts: ``x1 ~ q``; ``x2 = argmax q`` if ``x1`` differs
                          from it, else ``x2 ~ q`` on the rest.
``conditional_poisson``   an n-subset drawn with probability proportional to ``prod q``;
                          ``Q(H) = e_n(q_H) / e_n(q)``.
``top_n``                 deterministic: the n most likely tokens (ties by index), as EAGLE / SGLang
                          draft trees do; ``Q(H) = 1[Top_n in H]``, ``alpha* = p(Top_n)``.
"""

from __future__ import annotations

from .._validate import check_choice
from . import conditional_poisson, greedy, hub, top_n, with_replacement, without_replacement
from ._common import complement_masses, complement_parts, top_tokens
from .scheme import DraftScheme

__all__ = ["DraftScheme", "SCHEMES", "get_scheme", "complement_masses", "complement_parts", "top_tokens"]

#: Every registered scheme by name, in the order the documentation lists them.
SCHEMES: dict[str, DraftScheme] = {
    m.SCHEME.name: m.SCHEME
    for m in (with_replacement, without_replacement, greedy, hub, conditional_poisson, top_n)
}


#: Other accepted scheme names; matching ignores case and ``-`` vs ``_`` (``"With-Replacement"``).
SCHEME_ALIASES: dict[str, str] = {
    "iid": "with_replacement",
    "sequential": "without_replacement",
    "cp": "conditional_poisson",
    "top": "top_n",
}


def get_scheme(name) -> DraftScheme:
    """Look up a scheme by name or alias (``ValueError`` listing the choices and aliases when unknown).

    Parameters
    ----------
    name : str or DraftScheme
        Scheme name or alias, matched case-insensitively with ``-`` and ``_`` alike; a
        :class:`DraftScheme` is returned as is (``TypeError`` for another non-string).

    Returns
    -------
    DraftScheme

    >>> get_scheme("With-Replacement").name, get_scheme("iid").name, get_scheme("CP").name
    ('with_replacement', 'with_replacement', 'conditional_poisson')
    """
    if isinstance(name, DraftScheme):
        return name
    return SCHEMES[check_choice(name, "sampling", SCHEMES, SCHEME_ALIASES)]
