"""Four tree verifiers read from public descriptions, audited exactly: all four are biased.

Run ``python examples/biased_tree_verifiers.py`` (about half a minute on one CPU core). Each verifier
below is our own code, written from our reading of a paper's public description and of its authors'
released code (none of that code is copied; docs/tree-decoding.md#auditing-a-tree-verifier says what
was and was not available to us). Each is a plain ``law(tree) -> {tuple of tokens: probability}``, the
contract of :func:`mdsd_ot.trees.outcome_law`, so :func:`mdsd_ot.audit.audit_tree` decides exactly, by
enumerating every drafted tree of every chained call at tiny vocabularies, whether the stream of
emitted tokens has the target's law:

* ``gbv_mixed_ties``: greedy multi-path block verification (Thomas & Pal, arXiv 2602.16961) with the
  tie order of its reference code: the path choice breaks ties of the clipped ratio ``min(1, p/q)`` by
  draft order, the skewed draft law by token id. The library's ``gbv`` uses one order for both.
* ``spectr_gbv``: the one-call rule of SpecTr-GBV's released code (Lin, Sheng, Cai, Zhou, arXiv
  2604.25925), without the cross-call "distribution modification" its paper describes and its code
  lacks.
* ``hsd`` / ``hsd_min``: the single-draft rule of hierarchical speculative decoding's released code
  (Zhou et al., arXiv 2601.05724), with its two cappings of the target prefix mass.
* ``literal_traversal``: traversal verification (Weng et al., arXiv 2505.12398) with the paper's
  update for drafts without replacement (the rejected token leaves the parent's draft law) applied to
  i.i.d. drafts. On drafts without replacement it is the library's ``traversal`` and lossless.

The script then audits every tree verifier of the library the same way (all silent) and prints one
sampling audit, to show what a simulation of a few thousand streams can and cannot see.
"""

from __future__ import annotations

import time

import numpy as np

from mdsd_ot.audit import audit_tree, tree_audit_pairs
from mdsd_ot.trees import TREE_VERIFIERS, DraftTree
from mdsd_ot.trees.verifiers.gbv import best_of_k_law, clipped_ratio_order

BLOCK = TREE_VERIFIERS["block"]


def _emit(out: dict, prefix: tuple, law: np.ndarray, weight: float) -> None:
    """Add ``prefix + (y,)`` with ``weight * law(y) / sum(law)`` for every ``y`` of ``law``."""
    total = law.sum()
    for y in np.flatnonzero(law > 0):
        e = prefix + (int(y),)
        out[e] = out.get(e, 0.0) + weight * float(law[y] / total)


def _paths(tree) -> list:
    """The node lists ``[0, n_1, ..., n_L]`` of the ``K`` drafted paths of a ``KxL`` tree, in draft order."""
    out = []
    for c in tree.children[0]:
        nodes = [0, int(c)]
        while tree.children[nodes[-1]].size:
            nodes.append(int(tree.children[nodes[-1]][0]))
        out.append(nodes)
    return out


def _require_chains(tree, who: str) -> None:
    if not tree.shape.is_chains or tree.scheme.name != "with_replacement":
        raise ValueError(
            f"{who} verifies K x L trees of i.i.d. paths, not {tree.shape.label} {tree.scheme.name}"
        )


# ---------------------------------------------------------------------- GBV with two tie orders
def gbv_mixed_ties(tree) -> dict:
    """GBV whose path choice takes, at each depth, the first drafted candidate with the strictly largest
    clipped ratio (ties by draft order), while its skewed law ranks ties by token id."""
    _require_chains(tree, "GBV")
    P, Q, tok = tree.p, tree.q, tree.tokens
    K, L = tree.shape.branching[0], tree.shape.depth
    cands = _paths(tree)
    for d in range(L):  # the walk: ties of r go to the first drafted candidate
        v = cands[0][d]
        r = np.minimum(1.0, np.divide(P[v], Q[v], out=(P[v] > 0).astype(np.float64), where=Q[v] > 0))
        best = max(r[tok[c[d + 1]]] for c in cands)
        y = next(tok[c[d + 1]] for c in cands if r[tok[c[d + 1]]] == best)
        cands = [c for c in cands if tok[c[d + 1]] == y]
    path = cands[0]
    qts, a = [], 0.0
    for d in range(L):  # the skewed law: ties by token id (the library's order)
        v, x = path[d], int(tok[path[d + 1]])
        order = clipped_ratio_order(P[v], Q[v])
        qts.append(best_of_k_law(Q[v], order, a, K))
        a = (a + float(Q[v][order[: int(np.flatnonzero(order == x)[0])]].sum())) / float(Q[v][x])
    tokens = [-1] + [int(tok[v]) for v in path[1:]]
    chain = DraftTree(f"1x{L}", "with_replacement", tokens, list(range(-1, L)), np.stack(qts), checked=True)
    chain.set_target(P[path], checked=True)
    return BLOCK.outcome_law(chain)


# ------------------------------------------------------------------------- SpecTr-GBV, one call
def spectr_gbv(tree) -> dict:
    """SpecTr-GBV's released one-call rule, exactly (every coin enumerated).

    With ``phi(u) = (1 - u)^K``, for a prefix ``x`` of a drafted path with target and draft masses
    ``P``, ``Q`` and next-token laws ``p``, ``q``, and ``rho(y) = min(1, Q q(y) / (P p(y)))``: the
    candidates are scanned in draft order; each block ``t`` of candidate ``j`` longer than the accepted
    length and not already rejected is kept with probability ``clip(h, 0, 1)``,
    ``h = [sum_y P p(y) phi(rho(y)) - P phi(min(1, Q/P))] / [1 - phi(Q) - sum_y P p(y) (1 - phi(rho(y)))]``,
    then the whole candidate with ``P_L [1 - phi(min(1, Q_L/P_L))] / [1 - phi(Q_L)]``, which ends the
    scan. The call emits the kept prefix and one token: from ``p`` after a whole candidate, else from
    ``P p(y) [1 - rho(y)^K]`` normalised (``p`` when that is 0: our guard). The released code requires
    ``L >= 2``.
    """
    _require_chains(tree, "SpecTr-GBV")
    K, L = tree.shape.branching[0], tree.shape.depth
    if L < 2:
        raise ValueError("SpecTr-GBV's released code needs paths of length L >= 2")
    P, Q, tok = tree.p, tree.q, tree.tokens
    paths = _paths(tree)
    words = [tuple(int(tok[v]) for v in c[1:]) for c in paths]

    def phi(u):
        return (1.0 - u) ** K

    def masses(j, t):
        Pm = Qm = 1.0
        for i in range(t):
            v, x = paths[j][i], words[j][i]
            Pm *= P[v][x]
            Qm *= Q[v][x]
        return Pm, Qm

    def rho(Pm, Qm, v):
        num, den = Qm * Q[v], Pm * P[v]
        return np.minimum(1.0, np.divide(num, den, out=np.ones_like(num), where=den > 0))

    def h(j, t):
        Pm, Qm = masses(j, t)
        v = paths[j][t]
        r = rho(Pm, Qm, v)
        ratio = 1.0 if Pm == 0 else min(1.0, Qm / Pm)
        num = float(np.sum(Pm * P[v] * phi(r))) - Pm * phi(ratio)
        den = 1.0 - phi(Qm) - float(np.sum(Pm * P[v] * (1.0 - phi(r))))
        return float(np.clip(num / den, 0.0, 1.0)) if den > 0 else 0.0

    def whole(j):
        Pm, Qm = masses(j, L)
        ratio = 1.0 if Pm == 0 else min(1.0, Qm / Pm)
        return float(np.clip(Pm * (1.0 - phi(ratio)) / (1.0 - phi(Qm)), 0.0, 1.0))

    out: dict = {}

    def emit(n, sel, weight):
        if n == L:
            _emit(out, words[sel], P[paths[sel][L]], weight)
            return
        j = 0 if sel is None else sel
        Pm, Qm = masses(j, n)
        v = paths[j][n]
        law = Pm * P[v] * (1.0 - rho(Pm, Qm, v) ** K)
        _emit(out, words[j][:n], law if law.sum() > 0 else P[v], weight)

    def scan(j, t, n, sel, rejected, weight):
        if weight == 0.0:
            return
        if j == K:
            emit(n, sel, weight)
            return
        if t < L:
            if t <= n or words[j][:t] in rejected:
                scan(j, t + 1, n, sel, rejected, weight)
                return
            keep = h(j, t)
            scan(j, t + 1, t, j, rejected, weight * keep)
            scan(j, t + 1, n, sel, rejected | {words[j][:t]}, weight * (1.0 - keep))
            return
        a = whole(j)
        if a > 0:
            emit(L, j, weight * a)
        scan(j + 1, 1, n, sel, rejected, weight * (1.0 - a))

    scan(0, 1, 0, None, frozenset(), 1.0)
    return out


# ------------------------------------------------------------------- HSD, the single-draft rule
def hsd(tree, variant: str = "max") -> dict:
    """The single-draft rule of hierarchical speculative decoding's released code, exactly.

    Chain ``x_1..x_g`` with target laws ``p_i`` and draft laws ``q_i`` before ``x_i``; prefix masses
    ``A_i = prod_{j<i} p_j(x_j)``, ``B_i = prod_{j<i} q_j(x_j)``; a capped target mass ``T_i``
    (``"max"``: ``A_i / max(1, max_{k<=i} A_k / B_k)``; ``"min"``: ``min(A_i, B_i)``, the level's coin
    forced to 1 where ``A_i >= B_i``); excess ``e_i = (T_i p_i - B_i q_i)_+`` and deficit
    ``f_i = (B_i q_i - T_i p_i)_+``. Level ``i`` stays with probability ``sum e_i / max(sum e_i, sum
    f_i)`` (independent coins); the whole chain is accepted with ``min(1, A_{g+1} / B_{g+1})``, then a
    token from ``p_{g+1}``; otherwise the call emits ``x_1..x_{s-1}`` and a token from ``norm(e_s)``,
    ``s`` the last level that stayed (``p_s`` when ``e_s = 0``: our guard).
    """
    if any(b != 1 for b in tree.shape.branching):
        raise ValueError(f"HSD verifies one drafted chain (shape 1xL), not {tree.shape.label}")
    L = tree.shape.depth
    P, Q = tree.p, tree.q
    x = [int(t) for t in tree.tokens[1:]]
    A, B = [1.0], [1.0]
    for i in range(L):
        A.append(A[-1] * P[i][x[i]])
        B.append(B[-1] * Q[i][x[i]])
    stay, excess, top = [], [], 1.0
    for i in range(L):  # level i + 1 sits at node i
        if variant == "max":
            top = max(top, A[i] / B[i])
            T, forced = A[i] / top, False
        else:
            T, forced = min(A[i], B[i]), A[i] >= B[i]
        e = np.maximum(T * P[i] - B[i] * Q[i], 0.0)
        f = np.maximum(B[i] * Q[i] - T * P[i], 0.0)
        m = max(e.sum(), f.sum())
        stay.append(1.0 if forced or m == 0 else float(e.sum() / m))
        excess.append(e)
    out: dict = {}
    accept = min(1.0, A[L] / B[L])
    _emit(out, tuple(x), P[L], accept)
    left = 1.0 - accept
    for i in range(L - 1, -1, -1):  # the last level that stayed
        _emit(out, tuple(x[:i]), excess[i] if excess[i].sum() > 0 else P[i], left * stay[i])
        left *= 1.0 - stay[i]
    if left > 0:  # no level stayed (only when level 1's coin can fail): a token from p at the root
        _emit(out, (), P[0], left)
    return out


def hsd_min(tree) -> dict:
    """:func:`hsd` with the ``min`` capping (the multi-draft code's)."""
    return hsd(tree, "min")


# ------------------------------------------------------------- traversal, the paper's update on i.i.d.
def literal_traversal(tree) -> dict:
    """Traversal verification with the paper's draft-law update: after a child with token ``x`` is
    rejected, ``x`` leaves the parent's draft law (renormalised) before the next sibling is checked.

    Right for drafts without replacement (there it is the library's ``traversal``). On i.i.d. drafts a
    later sibling is checked against a law it was not drawn from, and a repeated token has draft
    probability 0 there: its acceptance ``0 / 0`` is taken as 0 (a float comparison with NaN never
    accepts) and the rejection update is applied as for any rejected child. (Skipping such a child
    instead would turn the i.i.d. draws into draws without replacement, and be lossless.)
    """
    P, Q, tok, kids = tree.p, tree.q, tree.tokens, tree.children
    out: dict = {}
    survive = [1.0]

    def stop(v, w, m) -> bool:
        if w > 0:
            _emit(out, tree.path(v), m, survive[0] * w)
        survive[0] *= 1.0 - w
        return survive[0] == 0.0

    def visit(v, w, m) -> bool:
        if kids[v].size:
            s = Q[v].copy()
            for c in kids[v]:
                x = int(tok[c])
                wc = min(1.0, m[x] / s[x]) if w > 0 and s[x] > 0 else 0.0
                if wc > 0 and visit(c, wc, wc * P[c]):
                    return True
                if w > 0:  # the rejection update of traversal verification
                    diff = m - s
                    D = float(np.maximum(-diff, 0.0).sum())
                    if D > 0:
                        w, m = min(1.0, float(np.maximum(diff, 0.0).sum()) / D), np.maximum(diff, 0.0) / D
                    else:
                        w, m = 1.0, P[v].copy()
                if s[x] > 0:  # the rejected token leaves the draft law
                    s[x] = 0.0
                    if s.sum() > 0:
                        s = s / s.sum()
        if v == 0:
            w, m = 1.0, (m if m.sum() > 0 else P[0])
        return stop(v, w, m)

    visit(0, 1.0, P[0].copy())
    return out


#: name -> (law, shapes, schemes) for the audits below.
EXAMPLES = {
    "gbv_mixed_ties": (gbv_mixed_ties, ["2x1", "2x2", "3x1"], ["with_replacement"]),
    "spectr_gbv": (spectr_gbv, ["2x2", "3x2", "1x2"], ["with_replacement"]),
    "hsd": (hsd, ["1x2", "1x3"], ["with_replacement", "without_replacement"]),
    "hsd_min": (hsd_min, ["1x2", "1x3"], ["with_replacement", "without_replacement"]),
    "literal_traversal (i.i.d.)": (literal_traversal, ["2x1", "2x2", "2,2"], ["with_replacement"]),
    "literal_traversal (w/o repl.)": (literal_traversal, ["2x1", "2x2", "2,2"], ["without_replacement"]),
}

#: the library's tree verifiers (and one node-wise verifier), with where they apply.
LIBRARY = {
    "block": (["1x2", "1x3"], ["with_replacement", "without_replacement", "top_n"]),
    "traversal": (["2x1", "2x2", "2,2"], ["with_replacement", "without_replacement", "top_n"]),
    "gbv": (["1x2", "2x1", "2x2", "3x1"], ["with_replacement"]),
    "rrs": (["2x1", "2x2", "2,2"], ["with_replacement"]),
}


def _row(name, r) -> str:
    w = r.worst
    verdict = "lossless" if r.lossless else "BIASED"
    where = "" if r.lossless else f"{w.pair}, {w.shape}, {w.scheme}"
    shown = "" if w.prefix is None or r.lossless else " ".join(map(str, w.prefix))
    gap = max(c.tokens_per_call - c.optimum for c in r.cases)
    return (
        f"| {name} | {', '.join(sorted({c.shape for c in r.cases}))} | {verdict} | {r.max_deviation:.2e} | "
        f"{where} | {shown} | {gap:+.4f} |"
    )


def main(k: int = 2) -> None:
    start = time.perf_counter()
    print("| verifier | shapes | verdict | max deviation | worst case | shortest prefix | tokens - optimum |")
    print("|---|---|---|---|---|---|---|")
    results = {}
    for name, (law, shapes, schemes) in EXAMPLES.items():
        results[name] = r = audit_tree(law, shapes, schemes, kind="law", k=k)
        print(_row(name, r))
    for name, (shapes, schemes) in LIBRARY.items():
        r = audit_tree(name, shapes, schemes, k=k)
        print(_row(name, r))
    print()
    print(results["hsd"])  # the details of one verdict
    print()
    # a sampling audit sees only large biases: HSD sampled, 4,000 streams, on two pairs
    pairs = {name: (name, t, d) for name, t, d in tree_audit_pairs(3, 0)}

    def hsd_sampled(tree, rng):
        law = hsd(tree)
        keys = list(law)
        return list(keys[int(rng.choice(len(keys), p=np.array([law[e] for e in keys])))])

    for name in ("sun", "mismatched"):
        exact = results["hsd"].cases[[c.pair for c in results["hsd"].cases].index(name)].max_deviation
        r = audit_tree(hsd_sampled, "1x2", pairs=[pairs[name]], trials=4000, k=k, optimum=False)
        print(f"sampled, pair {name} (exact deviation {exact:.2e}): " + str(r).splitlines()[1])
        print(str(r).splitlines()[2])
    print(f"\n({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
