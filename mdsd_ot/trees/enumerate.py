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
import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from .._config import (
    ENUMERATION_MAX_TUPLES,
    MAX_TREE_NODES,
    TREE_COMPARE_MAX_TREES,
    TREE_ENUMERATION_MAX,
    TREE_OPTIMUM_MAX_CLASSES,
)
from .._validate import check_probabilities
from ..drafts import DraftScheme, get_scheme, top_tokens
from .shape import TreeShape, parse_shape

__all__ = [
    "NextTokenLaw",
    "model_law",
    "as_next_token_law",
    "as_context",
    "toy_models",
    "laws_from_json",
    "unreachable_contexts",
    "TreeClass",
    "TreeEnumeration",
    "TreeSize",
    "enumerate_trees",
    "estimate_tree_size",
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
        ctx = context if type(context) is tuple and all(type(t) is int for t in context) else None
        if ctx is None or any(t < 0 for t in ctx):
            ctx = as_context(context, f"{self.name}'s context")
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


def as_context(context, what: str = "context") -> tuple:
    """A context as a tuple of token ids: ints (numpy and torch integers too) >= 0. A string, a bool,
    a float (``1.5``, also ``2.0``) or a negative id is refused (``TypeError`` / ``ValueError``), never
    converted.

    Parameters
    ----------
    context : sequence of int
    what : str
        Named in the messages.

    Returns
    -------
    tuple of int

    Examples
    --------
    >>> as_context([3, 1])
    (3, 1)
    """
    if isinstance(context, (str, bytes)) or not hasattr(context, "__iter__"):
        raise TypeError(
            f"{what} must be a sequence of token ids (ints), got {type(context).__name__} {context!r}"
        )
    out = []
    for k, t in enumerate(context):
        if isinstance(t, (bool, np.bool_)):
            raise TypeError(f"{what}[{k}] = {t!r} is a bool, not a token id")
        try:
            t = operator.index(t)
        except TypeError:
            raise TypeError(f"{what}[{k}] = {t!r} is not an integer token id") from None
        if t < 0:
            raise ValueError(f"{what}[{k}] = {t} is negative; token ids are >= 0")
        out.append(t)
    return tuple(out)


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
    embeddings = getattr(model, "get_input_embeddings", lambda: None)()
    vocab = getattr(embeddings, "num_embeddings", None)

    def law(ctx):
        if not ctx:
            raise ValueError(
                f"{name}: a causal LM needs a non-empty prompt; pass context=(token ids of the prompt)"
            )
        if vocab is not None and max(ctx) >= vocab:
            raise ValueError(
                f"{name}: token {max(ctx)} of context {list(ctx)} is outside the model's vocabulary "
                f"(ids 0 to {vocab - 1})"
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


def laws_from_json(payload, *, source: str | None = None):
    """``(target, draft)`` from a JSON-like object ``{"target": {...}, "draft": {...}}``.

    Each of the two maps a context to its next-token law: the key is the context's token ids joined
    by commas (``""`` for the empty context, ``"0,2"`` for tokens 0 then 2) and the value a list of
    ``V`` probabilities; the key ``"*"`` gives the law at every context not listed. A context that
    is needed but neither listed nor covered by ``"*"`` is a ``ValueError`` naming it.

    Every law is checked here, before any is used (``ValueError`` naming ``source``, the table and
    the context): a list of ``V`` numbers (no text, no bools), finite, non-negative, summing to one
    (:func:`mdsd_ot._validate.check_probabilities`), the same ``V`` everywhere (and equal to
    ``"vocab"`` when given); context tokens in ``0 .. V-1``; no context twice (``"0,1"`` and
    ``"0, 1"`` are one context). Which contexts a tree can reach depends on the shape:
    :func:`unreachable_contexts`.

    Parameters
    ----------
    payload : dict
        ``{"target": {context: law}, "draft": {context: law}}`` (a ``"vocab"`` entry is allowed);
        ``ValueError`` for another layout or an unreadable context.
    source : str or None
        Where the payload comes from (a file name), the first words of every message.

    Returns
    -------
    tuple of (NextTokenLaw, NextTokenLaw)
        ``(target, draft)``; each carries ``contexts``, the parsed keys of its table (``"*"`` kept).

    >>> t, d = laws_from_json({"target": {"*": [0.5, 0.5]}, "draft": {"": [1, 0], "*": [0, 1]}})
    >>> t((1, 0)).tolist(), d(()).tolist(), d((0,)).tolist()
    ([0.5, 0.5], [1.0, 0.0], [0.0, 1.0])
    """
    at = f"{source}: " if source else ""
    if not isinstance(payload, dict) or set(payload) - {"target", "draft", "vocab"} or len(payload) < 2:
        raise ValueError(
            f'{at}the laws must be a JSON object {{"target": {{context: law}}, "draft": {{context: law}}}}'
            + (f"; got keys {sorted(map(str, payload))}" if isinstance(payload, dict) else "")
        )
    vocab = payload.get("vocab")
    if vocab is not None and (isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 2):
        raise ValueError(f'{at}"vocab" must be an int >= 2 (the length of every law), got {vocab!r}')
    out, tables = [], {}
    for name in ("target", "draft"):
        table = payload.get(name)
        if not isinstance(table, dict) or not table:
            raise ValueError(f'{at}"{name}" must map contexts ("", "0", "0,2", or "*") to laws')
        laws, keys = {}, {}
        for key, law in table.items():
            ctx = _parse_context(key, f'{at}"{name}"')
            if ctx in laws:
                raise ValueError(
                    f'{at}"{name}" lists context {keys[ctx]!r} twice (also as {key!r}); '
                    f"keep one law per context"
                )
            where = f'{at}"{name}" law at context {key!r}'
            arr = _law_array(law, where)
            if vocab is None:
                vocab = int(arr.size)
            if arr.size != vocab:
                raise ValueError(
                    f'{where} has {arr.size} probabilities, another law (or "vocab") has {vocab}: every law '
                    f"needs one probability per token of the same vocabulary"
                )
            laws[ctx], keys[ctx] = arr, key
        tables[name] = (laws, keys)
    for name, (laws, keys) in tables.items():
        for ctx, key in keys.items():
            if ctx != "*" and any(not 0 <= t < vocab for t in ctx):
                raise ValueError(
                    f'{at}"{name}" context {key!r} names a token outside the vocabulary 0..{vocab - 1}; no '
                    f"tree can reach it"
                )
        law = NextTokenLaw(_table_law(f'{at}"{name}"' if at else name, laws), name)
        law.contexts = {ctx: keys[ctx] for ctx in laws}
        out.append(law)
    return out[0], out[1]


def _parse_context(key, where: str):
    """A laws table's key as a tuple of token ids (``"*"`` kept): ``"0,2"`` -> ``(0, 2)``."""
    if key == "*":
        return "*"
    text = str(key).replace(" ", "")
    try:
        return tuple(int(t) for t in text.split(",")) if text else ()
    except ValueError:
        raise ValueError(
            f'{where}: cannot read context {key!r}; write token ids joined by commas ("0,2"), "" for the '
            f'empty context or "*" for every other one'
        ) from None


def _law_array(law, where: str) -> np.ndarray:
    """One law of a laws table as a validated float64 vector (``ValueError`` naming ``where``)."""
    if not isinstance(law, (list, tuple)) or not law:
        raise ValueError(f"{where} must be a non-empty list of probabilities, got {json_repr(law)}")
    bad = [x for x in law if isinstance(x, bool) or not isinstance(x, (int, float))]
    if bad:
        raise ValueError(f"{where} holds {json_repr(bad[0])}; every entry must be a number (a probability)")
    try:
        arr = check_probabilities(np.array(law, dtype=np.float64), "it")
    except ValueError as exc:
        why = str(exc).split("; pass normalize=True")[0]  # a Python option, not the file's
        raise ValueError(
            f"{where}: {why}" + ("; fix the law in the file" if "sums to" in why else "")
        ) from None
    arr.setflags(write=False)
    return arr


def json_repr(x) -> str:
    """A short JSON-like rendering of a value for a message."""
    import json

    try:
        text = json.dumps(x)
    except (TypeError, ValueError):
        text = repr(x)
    return text if len(text) <= 40 else text[:37] + "..."


def unreachable_contexts(target, draft, shape, scheme) -> list:
    """The listed contexts of laws tables (:func:`laws_from_json`) that no drafted tree of ``shape``
    under ``scheme`` (at the empty context) can use: deeper than the tree (a target law is read at
    paths of up to ``depth`` tokens, a draft law at paths of fewer), or reached only through a token
    the draft law at an earlier context gives probability 0 (for ``top_n``: a token it never drafts
    there). Returns ``[(table name, key, reason)]``.

    Parameters
    ----------
    target, draft : NextTokenLaw
        From :func:`laws_from_json`.
    shape : str, sequence of int or TreeShape
    scheme : str or DraftScheme

    Returns
    -------
    list of tuple
    """
    shape = parse_shape(shape)
    scheme = get_scheme(scheme)
    depth = shape.depth
    out = []
    for law, deepest in ((target, depth), (draft, depth - 1)):
        for ctx, key in getattr(law, "contexts", {}).items():
            if ctx == "*":
                continue
            if len(ctx) > deepest:
                role = "target laws are read" if law is target else "draft laws are read"
                most = f"{deepest} token{'' if deepest == 1 else 's'}"
                out.append((law.name, key, f"{role} at paths of at most {most} in a {shape.label} tree"))
                continue
            for k in range(len(ctx)):
                if ctx[k] not in _drawable(draft, ctx[:k], shape.branching[k], scheme):
                    out.append(
                        (
                            law.name,
                            key,
                            f"token {ctx[k]} is never drafted after {list(ctx[:k])} under {scheme.name!r}",
                        )
                    )
                    break
    return out


def _drawable(draft, ctx: tuple, b: int, scheme) -> set:
    """Tokens a node at ``ctx`` drafts with positive probability (``b`` children)."""
    try:
        q = draft(ctx)
    except ValueError:  # no law there: the enumeration reports it if a tree needs it
        return set()
    if scheme.name == "top_n":
        return set(top_tokens(q, min(b, q.size)).tolist())
    return set(np.flatnonzero(q > 0).tolist())  # every other scheme can draft any such token


def _table_law(name: str, laws: dict):
    def law(ctx):
        if ctx in laws:
            return laws[ctx]
        if "*" in laws:
            return laws["*"]
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
        ``ValueError`` as soon as more path-set classes than this are certain (checked while
        enumerating, see Notes), naming the count so far and how to raise the limit.

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

    Every partial path set of positive probability grows into at least one full path set, and two
    different partial path sets at the same depth into different ones, so the number of distinct path
    sets met at any depth (and the number of distinct child sets one node can draw) is a lower bound
    on the number of classes: the limit is checked against them as they appear, and a refusal costs
    no more than the enumeration up to the first ``max_classes + 1`` of them.

    Examples
    --------
    >>> law = lambda ctx: [0.5, 0.5]
    >>> e = enumerate_trees(law, law, "2", "with_replacement")
    >>> [(c.paths, c.probability) for c in e.classes]
    [(((), (0,)), 0.25), (((), (0,), (1,)), 0.5), (((), (1,)), 0.25)]
    """
    max_classes = _positive_int(max_classes, "max_classes", low=1)
    target = as_next_token_law(target, "target")
    draft = as_next_token_law(draft, "draft")
    shape = parse_shape(shape)
    scheme = get_scheme(scheme)
    context = as_context(context)
    V = target(context).size
    if draft(context).size != V:
        raise ValueError(f"target and draft must have the same vocabulary; got {V} and {draft(context).size}")
    depth = shape.depth

    def refuse(count, d):
        raise ValueError(_too_many_classes_message(shape, scheme, V, count, d, max_classes))

    states = {(((),), (((), 1),)): 1.0}  # (paths, frontier ((path, multiplicity), ...)) -> probability
    for d, b in enumerate(shape.branching):
        last = d == depth - 1
        # a lower bound on the classes from the draft's supports alone, before any tuple is listed: a
        # node's distinct child sets each give another path set, and so do different path sets
        below: dict = {}  # path set -> distinct path sets it certainly grows into at this depth
        for paths, frontier in states:
            sets = 1
            for w, m in frontier:
                node = _child_sets(scheme.name, int(np.count_nonzero(draft(context + w))), b, m)
                if node > max_classes:
                    refuse(node, d + 1)
                sets = _sat(sets * node)
            below[paths] = max(below.get(paths, 0), sets)
        bound = _sat(sum(below.values()))
        if bound > max_classes:
            refuse(bound, d + 1)
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
        seen: set = set()  # distinct path sets at this depth: a lower bound on the number of classes
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
                ps = _sorted_paths(new_paths)
                if ps not in seen:
                    seen.add(ps)
                    if len(seen) > max_classes:
                        refuse(len(seen), d + 1)
                key = (ps, tuple(sorted(nxt)))
                grown[key] = grown.get(key, 0.0) + pr
        states = grown
    merged: dict = {}
    for (paths, _), pr in states.items():
        merged[paths] = merged.get(paths, 0.0) + pr
    classes = tuple(TreeClass(paths, pr) for paths, pr in sorted(merged.items()))
    return TreeEnumeration(shape, scheme, context, target, draft, classes)


def _too_many_classes_message(shape, scheme, V: int, count: int, d: int, max_classes: int) -> str:
    """The refusal of :func:`enumerate_trees`: the count so far, the full-support count, how to raise the
    limit and the schemes (never the one in use) that would fit under it."""
    try:
        full = estimate_tree_size(shape, scheme, V, check=False).classes
    except ValueError:  # a scheme without a size formula
        full = 0
    where = f"at least {count:,}" + (f" already by depth {d} of {shape.depth}" if d < shape.depth else "")
    if full >= _SIZE_CAP:
        total = "; more than 10^18 when every token has positive draft probability"
    elif full > count:
        total = f"; {full:,} when every token has positive draft probability"
    else:
        total = ""
    others = []
    for name in _SCHEME_FIT_ORDER:
        if name == scheme.name:
            continue
        try:
            alt = estimate_tree_size(shape, name, V)
        except ValueError:
            continue
        if alt.classes <= max_classes:
            others.append(f"{name!r} (at most {alt.classes:,} class{'' if alt.classes == 1 else 'es'})")
    fits = f", or a draft scheme with fewer distinct trees: {', '.join(others)}" if others else ""
    return (
        f"the drafted trees of shape {shape.label} under {scheme.name!r} at V = {V} fall into more than "
        f"max_classes = {max_classes:,} path-set classes ({where}{total}); the causal LP grows with "
        f"them (about classes x nodes x V columns): raise the limit with max_classes= (mdsd-ot trees "
        f"--max-classes) if you can afford it, or use a smaller vocabulary, a shape with fewer nodes{fits}"
    )


#: Schemes offered by a refusal when they fit under the limit, fewest distinct trees first.
_SCHEME_FIT_ORDER = (
    "top_n",
    "greedy",
    "hub",
    "conditional_poisson",
    "without_replacement",
    "with_replacement",
)

#: Counts of :func:`estimate_tree_size` saturate here ("more than 10^18").
_SIZE_CAP = 10**18


def _child_sets(name: str, k: int, b: int, m: int) -> int:
    """Distinct sets of children a node draws under scheme ``name`` with ``k`` tokens of positive draft
    probability, ``b`` children per copy and ``m`` copies of the node (0 for an unknown scheme, and
    where the scheme cannot draw: the scheme's own check reports that)."""
    if name == "with_replacement":  # every non-empty set of at most m b tokens
        total = 0
        for j in range(1, min(m * b, k) + 1):
            total = _sat(total + math.comb(k, j))
            if total == _SIZE_CAP:
                break
        return total
    if k < b:
        return 0
    if name in ("without_replacement", "conditional_poisson"):
        return min(math.comb(k, b), _SIZE_CAP)
    if name == "greedy":
        return k - b + 1
    if name == "hub":
        return k - 1 if b == 2 else 0
    if name == "top_n":
        return 1
    return 0


def _sat(x: int) -> int:
    return min(x, _SIZE_CAP)


@dataclass(frozen=True)
class TreeSize:
    """Sizes of the exact tree optimum's problem (:func:`estimate_tree_size`); each saturates at 10^18.

    Attributes
    ----------
    classes : int
        Path-set classes of drafted trees (the causal LP's tree blocks, ``TREE_OPTIMUM_MAX_CLASSES``).
    lp_columns : int
        Columns of the causal LP (:func:`mdsd_ot.trees.optimum.build_causal_lp`).
    ordered_trees : int
        Ordered drafted trees (what :func:`mdsd_ot.trees.compare_tree` evaluates every verifier on,
        ``TREE_COMPARE_MAX_TREES``).
    """

    classes: int
    lp_columns: int
    ordered_trees: int


def estimate_tree_size(
    shape,
    scheme,
    vocab: int,
    *,
    draft_support: int | None = None,
    target_support: int | None = None,
    check: bool = True,
) -> TreeSize:
    """The size of the tree optimum's problem before any law is read: exact when every draft law has
    ``draft_support`` tokens of positive probability and every target law ``target_support`` (both
    ``vocab`` by default), an upper bound when no law has more.

    Counts by depth, from the leaves up, with no enumeration (docs/math.md#the-exact-tree-optimum). A
    node drawing distinct children (every scheme but ``with_replacement``) from ``k`` tokens has ``s``
    possible child sets of ``b`` tokens (``C(k, b)`` without replacement and conditional Poisson,
    ``k - b + 1`` greedy, ``k - 1`` hub, 1 top-n) and independent subtrees below them:
    ``N_d = s N_{d+1}^b``. Under ``with_replacement`` a path drawn ``m`` times draws ``m b`` i.i.d.
    tokens; a subtree below a child needs a least number ``k_s`` of copies of that child, and a set of
    children with such subtrees is drawable from ``m`` copies exactly when ``sum k_s <= m b``: the counts
    are kept as polynomials in the number of copies. The total size of the classes (for the LP's
    columns, ``target_support`` per path of a class plus one per path) rides along as a dual number.

    Parameters
    ----------
    shape : str, sequence of int or TreeShape
    scheme : str or DraftScheme
    vocab : int
        Vocabulary size V (>= 2).
    draft_support, target_support : int or None
        Tokens of positive probability per draft and per target law (default ``vocab``; at most it).
    check : bool
        Raise the scheme's own ``ValueError`` when it cannot draw a level of the shape from
        ``draft_support`` tokens.

    Returns
    -------
    TreeSize
        Counts saturate at 10^18.

    Examples
    --------
    >>> estimate_tree_size("2,2", "with_replacement", 4)   # 660 classes, as enumerated
    TreeSize(classes=660, lp_columns=15893, ordered_trees=4096)
    >>> estimate_tree_size("1x30", "with_replacement", 2).classes   # 2**30, counted instantly
    1073741824
    """
    shape = parse_shape(shape)
    scheme = get_scheme(scheme)
    V = _positive_int(vocab, "vocab", low=2)
    k = V if draft_support is None else _positive_int(draft_support, "draft_support", low=1)
    kp = V if target_support is None else _positive_int(target_support, "target_support", low=1)
    if k > V or kp > V:
        raise ValueError(f"a support cannot exceed the vocabulary V = {V}; got {k} and {kp}")
    if check:
        for b in set(shape.branching):
            scheme.check(np.full(k, 1.0 / k), b)
    name = scheme.name
    if name not in _SCHEME_FIT_ORDER:
        raise ValueError(f"no size formula for the draft scheme {name!r}; known: {list(_SCHEME_FIT_ORDER)}")
    branching = shape.branching
    # paths that occur in some class: every token of the support is drawable except under top_n
    reach, level = 1, 1
    for b in branching:
        level = _sat(level * (b if name == "top_n" else k))
        reach = _sat(reach + level)
    ordered = 1
    for b in reversed(branching):
        tuples = {
            "with_replacement": k**b if b * math.log(max(k, 2)) < 42 else _SIZE_CAP,
            "without_replacement": math.perm(k, b) if k >= b else 0,
            "conditional_poisson": math.comb(k, b) if k >= b else 0,
            "greedy": max(k - b + 1, 0),
            "hub": 2 * (k - 1) if b == 2 else 0,
            "top_n": 1 if k >= b else 0,
        }[name]
        ordered = _sat(_sat(tuples) * _sat_pow(ordered, b))
    if name == "with_replacement":
        count, sizes = _with_replacement_classes(branching, k)
    else:
        count, sizes = 1, 1  # a leaf: one path set of one node
        for b in reversed(branching):
            s = _child_sets(name, k, b, 1)
            c_b, s_b = _dual_pow((count, sizes), b)
            count, sizes = _sat(s * c_b), _sat(s * (s_b + c_b))  # times (1 + eps): the node itself
    columns = _sat(_sat(kp * sizes) + min(reach, sizes)) if count else 0
    return TreeSize(count, columns, ordered if count else 0)


def _sat_pow(x: int, k: int) -> int:
    out = 1
    for _ in range(k):
        out = _sat(out * x)
        if out in (0, _SIZE_CAP):
            break
    return out


def _dual_mul(a, b):
    """``(c1 + s1 eps)(c2 + s2 eps)`` with ``eps^2 = 0`` (count and total size of pairs), saturating."""
    return _sat(a[0] * b[0]), _sat(a[0] * b[1] + a[1] * b[0])


def _dual_pow(a, k: int):
    out = (1, 0)
    for _ in range(k):
        out = _dual_mul(out, a)
    return out


def _with_replacement_classes(branching: tuple, V: int):
    """``(classes, total size of the classes)`` under i.i.d. drafts with full support (see
    :func:`estimate_tree_size`). ``F[k]``: dual number of the subtrees at a depth that need exactly ``k``
    copies of their root; a node's subtree with children ``S`` needs ``ceil(sum k_s / b)`` copies."""
    copies = [1]
    for b in branching:
        copies.append(min(copies[-1] * b, MAX_TREE_NODES))  # copies a node at each depth can have
    F = {1: (1, 1)}  # a leaf: one path set, of size 1, drawable by one copy
    for d in range(len(branching) - 1, -1, -1):
        b, top = branching[d], copies[d] * branching[d]
        new: dict = {}
        power = {0: (1, 0)}  # G^j, truncated at degree top (the most draws a depth-d node makes)
        for j in range(1, min(V, top) + 1):
            nxt: dict = {}
            for i, x in power.items():
                for k, y in F.items():
                    if i + k <= top:
                        z = _dual_mul(x, y)
                        old = nxt.get(i + k, (0, 0))
                        nxt[i + k] = (_sat(old[0] + z[0]), _sat(old[1] + z[1]))
            power = nxt
            if not power:
                break
            ways = _sat(math.comb(V, j))
            for K, (c, s) in power.items():
                m = -(-K // b)
                old = new.get(m, (0, 0))
                new[m] = (_sat(old[0] + ways * c), _sat(old[1] + ways * (s + c)))  # (1 + eps): the node
                if new[m][0] == _SIZE_CAP:
                    # one node's subtrees are at most the classes (the rest of the tree held fixed)
                    return _SIZE_CAP, _SIZE_CAP
        F = new
    return F.get(1, (0, 0))


def _outcomes(draft, context, w, m, b, scheme, last, cache) -> dict:
    """Law of what ``m`` independent ``b``-tuples drawn at path ``w`` leave: the set of tokens drawn
    (``last``) or the sorted ``(token, count)`` multiset (otherwise)."""
    key = (w, m)
    if key not in cache and scheme.name == "with_replacement":
        cache[key] = _iid_outcomes(scheme, draft(context + w), m * b, last)
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


def _iid_outcomes(scheme, q: np.ndarray, M: int, last: bool) -> dict:
    """:func:`_outcomes` for ``M`` i.i.d. draws from ``q``, by the multinomial law of their counts:
    ``P(c) = M! / prod c_y! prod q_y^c_y`` over the ``C(M + k - 1, k - 1)`` count vectors of the ``k``
    tokens of positive probability, instead of the ``k^M`` ordered tuples (3^13 = 1.6 million tuples,
    13 s, for the 105 count vectors of 13 draws from 3 tokens)."""
    scheme.check(q, M)
    support = np.flatnonzero(q > 0).tolist()
    k = len(support)
    count = math.comb(M + k - 1, k - 1)
    if count > ENUMERATION_MAX_TUPLES:
        raise ValueError(
            f"exact enumeration would visit {count:,} multisets of {M} draws from {k} tokens (limit "
            f"{ENUMERATION_MAX_TUPLES:,}); use a smaller vocabulary or a shape with fewer children"
        )
    qs = [float(q[y]) for y in support]
    law: dict = {}

    def visit(i, left, counts, coef):
        if i == k - 1:
            counts.append(left)
            pr = float(coef)
            for qy, c in zip(qs, counts):
                if c:
                    pr *= qy**c
            if pr > 0.0:
                drawn = [(support[j], c) for j, c in enumerate(counts) if c]
                o = frozenset(t for t, _ in drawn) if last else tuple(drawn)
                law[o] = law.get(o, 0.0) + pr
            counts.pop()
            return
        for c in range(left, -1, -1):
            counts.append(c)
            visit(i + 1, left - c, counts, coef * math.comb(left, c))
            counts.pop()

    visit(0, M, [], 1)
    return law


def _count_trees(e: TreeEnumeration) -> int:
    """Ordered trees: ``N(w, d) = sum over tuples x at w of prod_i N(w + x_i, d + 1)``, ``N(leaf) = 1``;
    for i.i.d. drafts ``(sum over tokens x with q(x) > 0 of N(w + x, d + 1))^b`` (no tuple listed)."""
    memo: dict = {}
    branching = e.shape.branching
    iid = e.scheme.name == "with_replacement"

    def count(w):
        d = len(w)
        if d == len(branching):
            return 1
        if w not in memo:
            q = e.q(w)
            if iid:
                e.scheme.check(q, branching[d])
                memo[w] = sum(count(w + (x,)) for x in np.flatnonzero(q > 0).tolist()) ** branching[d]
            else:
                tuples, _ = e.scheme.tuple_law(q, branching[d])
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
