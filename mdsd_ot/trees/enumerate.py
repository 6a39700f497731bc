"""Every drafted tree of a shape and draft scheme, with its probability (docs/math.md#the-exact-tree-optimum).

Two views of the same law over drafted trees at one context:

* :meth:`TreeEnumeration.trees` -- every *ordered* drafted tree (a :class:`~mdsd_ot.trees.DraftTree`,
  children in draw order, repeated tokens kept) with its probability: the product over internal
  nodes of the scheme's exact tuple law (:meth:`mdsd_ot.DraftScheme.tuple_law`), the draws of
  different nodes being independent given their contexts. Node-wise and tree-level verifiers are
  evaluated on these.
* :attr:`TreeEnumeration.classes` -- the same law aggregated by **path set**: two drafted trees with the
  same set of root-to-node paths are one class. A verifier may emit a path of the tree followed by
  one token, and the target laws it may use are those after the paths, so what any verifier can do
  depends on the tree only through its path set; the causal LP of :func:`mdsd_ot.trees.tree_optimum`
  needs one block of variables per class, not per ordered tree (repeated drafts and the order of
  siblings collapse). The classes are computed level by level without listing the ordered trees:
  a partial tree is kept as (its path set, the paths of its deepest nodes with their multiplicities),
  which is all that its future draws depend on.

The models are callables ``law(context) -> (V,)`` (``context`` a tuple of token ids), or tiny torch
causal LMs through :func:`model_law`; each law is validated and cached by context.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from .._config import TREE_COMPARE_MAX_TREES, TREE_ENUMERATION_MAX, TREE_OPTIMUM_MAX_CLASSES
from .._validate import check_probabilities
from ..drafts import DraftScheme, get_scheme
from .shape import TreeShape, parse_shape

__all__ = [
    "NextTokenLaw",
    "model_law",
    "as_next_token_law",
    "toy_models",
    "laws_from_json",
    "TreeClass",
    "TreeEnumeration",
    "enumerate_trees",
    "path_set",
]


# ------------------------------------------------------------------------------------------ models
class NextTokenLaw:
    """A validated, cached next-token law: ``law(context) -> ndarray (V,)`` float64, summing to one.

    Parameters
    ----------
    fn : callable
        ``fn(context) -> array_like (V,)``, ``context`` a tuple of int token ids.
    name : str
        Used in error messages (``"target"``, ``"draft"``).

    Examples
    --------
    >>> law = NextTokenLaw(lambda ctx: [0.5, 0.5] if len(ctx) % 2 else [0.25, 0.75], "target")
    >>> law((1,)).tolist(), law(()).tolist(), law.vocab
    ([0.5, 0.5], [0.25, 0.75], 2)
    """

    def __init__(self, fn: Callable, name: str):
        if not callable(fn):
            raise TypeError(f"{name} must be a callable context -> next-token law, got {type(fn).__name__}")
        self.fn, self.name, self.vocab, self._memo = fn, name, None, {}

    def __call__(self, context) -> np.ndarray:
        ctx = tuple(int(t) for t in context)
        law = self._memo.get(ctx)
        if law is None:
            law = check_probabilities(self.fn(ctx), f"{self.name}({list(ctx)})")
            law /= law.sum()
            if self.vocab is None:
                self.vocab = int(law.size)
            elif law.size != self.vocab:
                raise ValueError(
                    f"{self.name}({list(ctx)}) has {law.size} tokens, its law at another context had "
                    f"{self.vocab}: every context needs the same vocabulary"
                )
            law.setflags(write=False)
            self._memo[ctx] = law
        return law

    def __repr__(self) -> str:
        return f"<NextTokenLaw {self.name}, V={self.vocab}>"


def _is_torch_module(obj) -> bool:
    """True for a ``torch.nn.Module`` (checked by class name: torch is not imported here)."""
    return any(c.__name__ == "Module" and c.__module__.startswith("torch.nn") for c in type(obj).__mro__)


def model_law(model, temperature: float = 1.0, *, name: str = "model") -> NextTokenLaw:
    """The next-token law of a causal LM: softmax of the last position's logits at ``temperature``.

    ``law(context)`` runs ``model`` on the prompt ``context`` (a non-empty tuple of token ids, one
    batch row, no cache) and returns :func:`mdsd_ot.backends.torch.to_distribution` of the last
    position's logits at ``temperature`` as float64 numpy (cached by context). For tiny models (tests,
    :func:`mdsd_ot.trees.tree_optimum` at small scale): one full forward per context.

    Parameters
    ----------
    model : torch.nn.Module
        A causal LM whose output has ``logits`` (or is the logits), shape ``(1, L, V)``; ``TypeError``
        for anything else.
    temperature : float
        Softmax temperature (validated by ``to_distribution``).
    name : str
        Used in error messages.

    Returns
    -------
    NextTokenLaw
    """
    from ..backends.torch import require_torch, to_distribution

    torch = require_torch()
    if not _is_torch_module(model):
        raise TypeError(f"model_law needs a torch causal LM (torch.nn.Module), got {type(model).__name__}")
    to_distribution(torch.zeros(1), temperature=temperature)  # validate the temperature now
    try:
        device = next(model.parameters()).device
    except StopIteration:
        device = "cpu"

    def law(ctx):
        if not ctx:
            raise ValueError(
                f"{name}: a causal LM needs a non-empty prompt; pass context=(token ids of the prompt)"
            )
        with torch.no_grad():
            out = model(torch.tensor([list(ctx)], dtype=torch.long, device=device))
        logits = getattr(out, "logits", out)[0, -1]
        return to_distribution(logits, temperature=temperature).cpu().numpy()

    return NextTokenLaw(law, name)


def as_next_token_law(model, name: str) -> NextTokenLaw:
    """``model`` as a :class:`NextTokenLaw`: kept if it is one, a torch LM through :func:`model_law` at
    temperature 1, any other callable wrapped as ``context -> law``.

    Parameters
    ----------
    model : NextTokenLaw, torch.nn.Module or callable
        ``context -> array_like (V,)`` for a plain callable.
    name : str
        Used in error messages (``"target"``, ``"draft"``).

    Returns
    -------
    NextTokenLaw
    """
    if isinstance(model, NextTokenLaw):
        return model
    if _is_torch_module(model):
        return model_law(model, 1.0, name=name)
    return NextTokenLaw(model, name)


def toy_models(vocab: int = 3, seed: int = 0, temperature: float = 1.0, noise: float = 1.0):
    """A toy target and draft with context-dependent laws, built from a seed.

    At context ``c`` the target is ``softmax(z_c)`` and the draft ``softmax((z_c + noise e_c) /
    temperature)``, with ``z_c`` and ``e_c`` standard normal vectors of ``vocab`` entries drawn from
    ``numpy.random.default_rng([seed, len(c), *c])``: every call at the same context gives the same law.

    Parameters
    ----------
    vocab : int
        Vocabulary size V (>= 2).
    seed : int
        Seed (>= 0).
    temperature : float
        Temperature of the draft (> 0).
    noise : float
        Scale of the draft's perturbation ``e_c`` (>= 0; 0 with temperature 1: draft = target).

    Returns
    -------
    (NextTokenLaw, NextTokenLaw)
        ``(target, draft)``.

    Examples
    --------
    >>> target, draft = toy_models(3, seed=0)
    >>> target((1, 2)).round(3).tolist() == target((1, 2)).round(3).tolist(), target(()).size
    (True, 3)
    """
    vocab, seed = _positive_int(vocab, "vocab", low=2), _positive_int(seed, "seed", low=0)
    for value, what in ((temperature, "temperature"), (noise, "noise")):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{what} must be a finite number, got {value!r}")
    if temperature <= 0 or noise < 0:
        raise ValueError(f"need temperature > 0 and noise >= 0, got {temperature!r} and {noise!r}")

    def logits(ctx):
        rng = np.random.default_rng([seed, len(ctx), *ctx])
        return rng.standard_normal(vocab), rng.standard_normal(vocab)

    def softmax(z):
        e = np.exp(z - z.max())
        return e / e.sum()

    def target(ctx):
        return softmax(logits(ctx)[0])

    def draft(ctx):
        z, e = logits(ctx)
        return softmax((z + noise * e) / temperature)

    return NextTokenLaw(target, "target"), NextTokenLaw(draft, "draft")


def _positive_int(x, what: str, *, low: int) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{what} must be an int, got {type(x).__name__} {x!r}")
    if x < low:
        raise ValueError(f"{what} must be >= {low}, got {x}")
    return int(x)


def laws_from_json(payload):
    """``(target, draft)`` from a JSON-like object ``{"target": {...}, "draft": {...}}``.

    Each of the two maps a context to its next-token law: the key is the context's token ids joined
    by commas (``""`` for the empty context, ``"0,2"`` for tokens 0 then 2) and the value a list of
    ``V`` probabilities; the key ``"*"`` gives the law at every context not listed. A context that
    is needed but neither listed nor covered by ``"*"`` is a ``ValueError`` naming it.

    Parameters
    ----------
    payload : dict
        ``{"target": {context: law}, "draft": {context: law}}`` (a ``"vocab"`` entry is allowed);
        ``ValueError`` for another layout or an unreadable context.

    Returns
    -------
    tuple of (NextTokenLaw, NextTokenLaw)
        ``(target, draft)``.

    >>> t, d = laws_from_json({"target": {"*": [0.5, 0.5]}, "draft": {"": [1, 0], "*": [0, 1]}})
    >>> t((1, 0)).tolist(), d(()).tolist(), d((0,)).tolist()
    ([0.5, 0.5], [1.0, 0.0], [0.0, 1.0])
    """
    if not isinstance(payload, dict) or set(payload) - {"target", "draft", "vocab"} or len(payload) < 2:
        raise ValueError(
            'the laws file must hold a JSON object {"target": {context: law}, "draft": {context: law}}'
        )
    out = []
    for name in ("target", "draft"):
        table = payload.get(name)
        if not isinstance(table, dict) or not table:
            raise ValueError(f'"{name}" must map contexts ("" , "0", "0,2", or "*") to laws')
        laws = {}
        for key, law in table.items():
            if key == "*":
                laws["*"] = law
                continue
            text = str(key).replace(" ", "")
            try:
                ctx = tuple(int(t) for t in text.split(",")) if text else ()
            except ValueError:
                raise ValueError(
                    f'{name}: cannot read context {key!r}; write token ids joined by commas ("0,2"), '
                    f'"" for the empty context or "*" for every other one'
                ) from None
            laws[ctx] = law
        out.append(NextTokenLaw(_table_law(name, laws), name))
    return out[0], out[1]


def _table_law(name: str, laws: dict):
    def law(ctx):
        if ctx in laws:
            return np.asarray(laws[ctx], dtype=np.float64)
        if "*" in laws:
            return np.asarray(laws["*"], dtype=np.float64)
        raise ValueError(
            f"{name} has no law for context {','.join(map(str, ctx)) or '(empty)'!r} and no '*' entry"
        )

    return law


# ------------------------------------------------------------------------------------- enumeration
@dataclass(frozen=True)
class TreeClass:
    """The drafted trees that share one set of root-to-node paths.

    Attributes
    ----------
    paths : tuple of tuple of int
        The path set, sorted by length then tokens; ``()`` (the root) first.
    probability : float
        Probability that the drafted tree has this path set.
    """

    paths: tuple
    probability: float


def path_set(tree) -> tuple:
    """The sorted set of root-to-node paths of a :class:`~mdsd_ot.trees.DraftTree` (its class key).

    Parameters
    ----------
    tree : DraftTree

    Returns
    -------
    tuple of tuple of int
        The paths sorted by length then tokens; ``()`` (the root) first.
    """
    return _sorted_paths({tree.path(v) for v in range(tree.tokens.size)})


def _sorted_paths(paths) -> tuple:
    return tuple(sorted(paths, key=lambda w: (len(w), w)))


@dataclass(frozen=True)
class TreeEnumeration:
    """The exact law of the drafted tree at one context, by path-set class (see the module docstring).

    Attributes
    ----------
    shape : TreeShape
    scheme : DraftScheme
    context : tuple of int
        The tokens before the root (the laws are taken at ``context + path``).
    target, draft : NextTokenLaw
    classes : tuple of TreeClass
        Every class of positive probability, sorted by path set; probabilities sum to one.
    """

    shape: TreeShape
    scheme: DraftScheme
    context: tuple
    target: NextTokenLaw = field(repr=False)
    draft: NextTokenLaw = field(repr=False)
    classes: tuple = field(repr=False)

    @property
    def vocab(self) -> int:
        return int(self.target(self.context).size)

    @property
    def paths(self) -> tuple:
        """Every path that occurs in some class, sorted by length then tokens."""
        return _sorted_paths({w for c in self.classes for w in c.paths})

    def p(self, path) -> np.ndarray:
        """The target's next-token law after ``path`` (below the root)."""
        return self.target(self.context + tuple(path))

    def q(self, path) -> np.ndarray:
        """The draft's next-token law after ``path``."""
        return self.draft(self.context + tuple(path))

    def n_trees(self) -> int:
        """The number of ordered drafted trees of positive probability (what :meth:`trees` yields)."""
        return _count_trees(self)

    def trees(self, *, max_trees: int = TREE_COMPARE_MAX_TREES) -> Iterator:
        """Every ordered drafted tree with its probability: ``(DraftTree, probability)`` pairs.

        The trees share one memo (prepared verifiers are cached by path). ``ValueError`` when there are
        more than ``max_trees`` of them (counted before any is built)."""
        count = self.n_trees()
        if count > max_trees:
            raise ValueError(
                f"{count:,} ordered drafted trees of shape {self.shape.label} under {self.scheme.name!r} "
                f"(limit {max_trees:,}); use a smaller vocabulary or a shape with fewer nodes"
            )
        return _ordered_trees(self)


def enumerate_trees(
    target, draft, shape, scheme, *, context=(), max_classes: int = TREE_OPTIMUM_MAX_CLASSES
) -> TreeEnumeration:
    """The law of the drafted tree at ``context``, aggregated by path set.

    Parameters
    ----------
    target, draft : callable or torch causal LM
        Next-token laws (:func:`as_next_token_law`).
    shape : str, sequence of int or TreeShape
    scheme : str or DraftScheme
    context : tuple of int
        Tokens before the root.
    max_classes : int
        ``ValueError`` naming the count when there are more path-set classes than this.

    Returns
    -------
    TreeEnumeration

    Notes
    -----
    Level ``d`` keeps one state per (path set so far, multiset of depth-``d`` paths): a node's
    children are drawn from the node's own law only, so two partial trees with equal states have equal
    futures. A node whose path occurs ``m`` times draws ``m`` independent tuples; below the last level
    only the set of drawn tokens matters, above it their multiplicities. Work: the number of state
    expansions, bounded by ``TREE_ENUMERATION_MAX``.

    Examples
    --------
    >>> law = lambda ctx: [0.5, 0.5]
    >>> e = enumerate_trees(law, law, "2", "with_replacement")
    >>> [(c.paths, c.probability) for c in e.classes]
    [(((), (0,)), 0.25), (((), (0,), (1,)), 0.5), (((), (1,)), 0.25)]
    """
    target = as_next_token_law(target, "target")
    draft = as_next_token_law(draft, "draft")
    shape = parse_shape(shape)
    scheme = get_scheme(scheme)
    context = tuple(int(t) for t in context)
    V = target(context).size
    if draft(context).size != V:
        raise ValueError(f"target and draft must have the same vocabulary; got {V} and {draft(context).size}")
    depth = shape.depth
    states = {(((),), (((), 1),)): 1.0}  # (paths, frontier ((path, multiplicity), ...)) -> probability
    for d, b in enumerate(shape.branching):
        last = d == depth - 1
        outcome_cache: dict = {}
        work = 0
        for _, frontier in states:
            n = 1
            for w, m in frontier:
                n *= len(_outcomes(draft, context, w, m, b, scheme, last, outcome_cache))
            work += n
            if work > TREE_ENUMERATION_MAX:
                raise ValueError(
                    f"enumerating the drafted trees of shape {shape.label} under {scheme.name!r} at V = {V} "
                    f"takes more than TREE_ENUMERATION_MAX = {TREE_ENUMERATION_MAX:,} steps at depth "
                    f"{d + 1}; use a smaller vocabulary or a shape with fewer nodes"
                )
        grown: dict = {}
        for (paths, frontier), prob in states.items():
            laws = [_outcomes(draft, context, w, m, b, scheme, last, outcome_cache) for w, m in frontier]
            for combo in itertools.product(*[law.items() for law in laws]):
                pr, new_paths, nxt = prob, set(paths), []
                for (w, _), (outcome, w_pr) in zip(frontier, combo):
                    pr *= w_pr
                    if last:
                        new_paths.update(w + (t,) for t in outcome)
                    else:
                        for t, k in outcome:
                            new_paths.add(w + (t,))
                            nxt.append((w + (t,), k))
                key = (_sorted_paths(new_paths), tuple(sorted(nxt)))
                grown[key] = grown.get(key, 0.0) + pr
        states = grown
    merged: dict = {}
    for (paths, _), pr in states.items():
        merged[paths] = merged.get(paths, 0.0) + pr
    if len(merged) > max_classes:
        raise ValueError(
            f"the drafted trees of shape {shape.label} under {scheme.name!r} at V = {V} fall into "
            f"{len(merged):,} path-set classes, more than the limit {max_classes:,} "
            f"(TREE_OPTIMUM_MAX_CLASSES); use a smaller vocabulary, a shape with fewer nodes, or a "
            f"scheme that draws fewer distinct trees (top_n, greedy)"
        )
    classes = tuple(TreeClass(paths, pr) for paths, pr in sorted(merged.items()))
    return TreeEnumeration(shape, scheme, context, target, draft, classes)


def _outcomes(draft, context, w, m, b, scheme, last, cache) -> dict:
    """Law of what ``m`` independent ``b``-tuples drawn at path ``w`` leave: the set of tokens drawn
    (``last``) or the sorted ``(token, count)`` multiset (otherwise)."""
    key = (w, m)
    if key not in cache:
        tuples, probs = scheme.tuple_law(draft(context + w), b)
        one: dict = {}
        for t, pr in zip(tuples.tolist(), probs.tolist()):
            o = frozenset(t) if last else tuple(sorted(t))
            one[o] = one.get(o, 0.0) + pr
        law = {frozenset() if last else (): 1.0}
        for _ in range(m):
            nxt: dict = {}
            for a, pa in law.items():
                for o, po in one.items():
                    c = a | o if last else tuple(sorted(a + o))
                    nxt[c] = nxt.get(c, 0.0) + pa * po
            law = nxt
        if not last:
            law = {tuple((t, o.count(t)) for t in sorted(set(o))): pr for o, pr in law.items()}
        cache[key] = law
    return cache[key]


def _count_trees(e: TreeEnumeration) -> int:
    """Ordered trees: ``N(w, d) = sum over tuples x at w of prod_i N(w + x_i, d + 1)``, ``N(leaf) = 1``."""
    memo: dict = {}
    branching = e.shape.branching

    def count(w):
        d = len(w)
        if d == len(branching):
            return 1
        if w not in memo:
            tuples, _ = e.scheme.tuple_law(e.q(w), branching[d])
            memo[w] = sum(math.prod(count(w + (x,)) for x in t) for t in tuples.tolist())
        return memo[w]

    return count(())


def _ordered_trees(e: TreeEnumeration) -> Iterator:
    """Depth-first over the levels: the draws of one level (every node's tuple), then the next level."""
    from .tree import DraftTree

    memo: dict = {}
    branching = e.shape.branching

    def grow(d, tokens, parent, paths, qs, prob, frontier):
        if d == len(branching):
            p = np.array([e.p(w) for w in paths])
            yield DraftTree(e.shape, e.scheme, tokens, parent, np.array(qs), p, memo=memo), prob
            return
        laws = [e.q(paths[v]) for v in frontier]
        options = [list(zip(*e.scheme.tuple_law(q, branching[d]))) for q in laws]
        for combo in itertools.product(*options):
            t, a, ps, pr, nxt = list(tokens), list(parent), list(paths), prob, []
            for v, (tup, w) in zip(frontier, combo):
                pr *= float(w)
                for x in tup.tolist():
                    t.append(x)
                    a.append(v)
                    ps.append(paths[v] + (x,))
                    nxt.append(len(t) - 1)
            yield from grow(d + 1, t, a, ps, qs + laws, pr, nxt)

    yield from grow(0, [-1], [-1], [()], [], 1.0, [0])
