r"""Confidence intervals of a mean over correlated values: the one formula of every summary.

Positions of one prompt (or problem) are correlated, so a mean over positions gets the
cluster-robust ("clustered") interval over the ``G`` prompts rather than an i.i.d. one. For values
:math:`x_i`, :math:`i = 1..m`, in clusters :math:`g = 1..G`, with mean :math:`\bar x`:

.. math::

    \widehat{se}^2 = \frac{G}{G-1} \sum_g \Big(\sum_{i \in g} (x_i - \bar x)\Big)^2 \Big/ m^2,
    \qquad \bar x \pm t_{1 - (1 - \ell)/2,\; G-1} \, \widehat{se},

the sandwich variance of the mean with the small-sample factor :math:`G/(G-1)` and the quantile of
Student's t on :math:`G - 1` degrees of freedom (the normal quantile 1.96 understates the width with
few clusters: with 6 clusters t(5) gives 2.571, 31% wider). With one cluster there is no
between-cluster variation to estimate: the half-width is NaN (shown without ``±``).

Used by ``mdsd-ot demo``, ``study``, ``merge`` and ``decode`` (:func:`cluster_mean_ci`), and by the
headers of their summaries (:func:`interval_note`). Light: scipy is imported on the first quantile.
See docs/math.md#clustered-intervals.
"""

from __future__ import annotations

import math
from functools import lru_cache

__all__ = ["t_quantile", "cluster_mean_ci", "interval_note", "LEVEL"]

#: Confidence level of every interval of the summaries.
LEVEL = 0.95


def _check_level(level) -> float:
    level = float(level)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    return level


@lru_cache(maxsize=1024)
def _t(df: int, level: float) -> float:
    from scipy.stats import t

    return float(t.ppf(0.5 + level / 2.0, df))


def t_quantile(clusters: int, level: float = LEVEL) -> float:
    """Two-sided quantile of Student's t on ``clusters - 1`` degrees of freedom.

    Parameters
    ----------
    clusters : int
        Number of clusters ``G``.
    level : float
        Confidence level (0.95: the 0.975 quantile).

    Returns
    -------
    float
        :math:`t_{(1+\\ell)/2,\\,G-1}`; NaN when ``G < 2``.

    >>> round(t_quantile(6), 4), round(t_quantile(2), 4)
    (2.5706, 12.7062)
    """
    level = _check_level(level)
    g = int(clusters)
    if g != clusters:
        raise TypeError(f"clusters must be an integer, got {clusters!r}")
    if g < 2:
        return float("nan")
    return _t(g - 1, level)


def cluster_mean_ci(values, groups, *, level: float = LEVEL) -> tuple[float, float]:
    """Mean and clustered half-width ``t_{G-1} * se`` (see the module docstring).

    Parameters
    ----------
    values : sequence of float
        The values (``m >= 1``).
    groups : sequence
        Cluster label of each value (hashable; e.g. the prompt id), same length.
    level : float
        Confidence level.

    Returns
    -------
    (float, float)
        The mean and the half-width; the half-width is NaN with fewer than two clusters.

    Sums are exactly rounded (:func:`math.fsum`), so the result does not depend on the order of the
    values: a resumed study, whose rows are in another order, gives the same bytes.

    >>> mean, half = cluster_mean_ci([0.1, 0.3, 0.2, 0.9, 0.7], ["a", "a", "b", "c", "c"])
    >>> round(mean, 4), round(half, 4)
    (0.44, 0.9464)
    >>> cluster_mean_ci([0.5, 0.7], ["a", "a"])  # one cluster: no interval
    (0.6, nan)
    """
    x = [float(v) for v in values]
    labels = list(groups)
    if len(labels) != len(x):
        raise ValueError(f"values and groups differ in length: {len(x)} and {len(labels)}")
    m = len(x)
    if m == 0:
        raise ValueError("no values: a mean needs at least one")
    mean = math.fsum(x) / m
    parts: dict = {}
    for g, v in zip(labels, x):
        parts.setdefault(g, []).append(v - mean)
    G = len(parts)
    if G < 2:
        return mean, float("nan")
    var = math.fsum(math.fsum(r) ** 2 for r in parts.values()) / m**2 * (G / (G - 1))
    return mean, t_quantile(G, level) * math.sqrt(var)


def interval_note(clusters: int, unit: str = "prompt", level: float = LEVEL) -> str:
    """The sentence a summary's header states about its intervals, naming the number of clusters.

    Parameters
    ----------
    clusters : int
        Number of clusters G (fewer than 2: the sentence says there are no intervals).
    unit : str
        What a cluster is (singular noun, e.g. ``"prompt"``, ``"problem"``).
    level : float
        Confidence level in (0, 1) (``ValueError`` outside).

    Returns
    -------
    str

    >>> interval_note(6, "problem")
    '95% intervals clustered by problem: mean ± t(G-1) · se over G = 6 problems (t(5) = 2.571).'
    >>> interval_note(1)
    '95% intervals clustered by prompt: none, a single prompt gives no between-prompt variation.'
    """
    pct = f"{100 * _check_level(level):g}%"
    g = int(clusters)
    if g < 2:
        return (
            f"{pct} intervals clustered by {unit}: none, a single {unit} gives no between-{unit} variation."
        )
    return (
        f"{pct} intervals clustered by {unit}: mean ± t(G-1) · se over G = {g} {unit}s "
        f"(t({g - 1}) = {t_quantile(g, level):.3f})."
    )
