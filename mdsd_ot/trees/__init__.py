"""Multi-step speculative decoding with draft trees (docs/math.md#draft-trees).

* :mod:`.shape` -- tree shapes by branching per depth (``"4x4"`` chains, ``"4,2,2,1"``);
* :mod:`.union` -- one drafted tree for every smaller shape (first-children sub-trees), forests;
* :mod:`.tree` -- drafting a tree with any draft scheme, verifying it with any registered verifier,
  and the exact expected tokens per target call of every verifier from one drafted tree;
* :mod:`.verifiers` -- tree-level verifiers (:data:`TREE_VERIFIERS`: block and traversal
  verification), which verify a whole chain or tree at once;
* :mod:`.enumerate`, :mod:`.optimum`, :mod:`.compare` -- every drafted tree with its probability, the
  exact optimum over all valid tree verifiers (the causal LP, :func:`tree_optimum`) and every valid
  verifier against it (:func:`compare_tree`), at small scale;
* :mod:`.bound` -- the LP's dual on the tree a call drafted (:func:`upper_bound`): per-tree values
  whose mean over drafted trees is a certified upper bound on every valid verifier, at any vocabulary.

The real decoder over Hugging Face models is :mod:`mdsd_ot.decode`.
"""

from .bound import RULES, DualHeights, certified_rules, default_rule, mean_upper_bound, upper_bound
from .compare import TreeComparison, TreeComparisonRecord, compare_tree
from .enumerate import (
    NextTokenLaw,
    TreeEnumeration,
    enumerate_trees,
    estimate_tree_size,
    model_law,
    toy_models,
)
from .optimum import LPTreeVerifier, TreeOptimum, tree_optimum
from .shape import TreeShape, parse_shape
from .tree import (
    DraftTree,
    bound_estimate,
    canonical_verifier,
    draft_tree,
    expected_tokens,
    node_alpha_heuristic,
    node_bound,
    node_bounds,
    outcome_law,
    speedup,
    valid_verifiers,
    verifier_names,
    verify_tree,
)
from .union import draft_forest, first_children, is_subshape, union_shape
from .verifiers import TREE_VERIFIERS, TreeVerifier

__all__ = [
    "TreeShape",
    "parse_shape",
    "DraftTree",
    "draft_tree",
    "expected_tokens",
    "node_alpha_heuristic",
    "bound_estimate",
    "node_bound",
    "node_bounds",
    "outcome_law",
    "verify_tree",
    "speedup",
    "valid_verifiers",
    "union_shape",
    "is_subshape",
    "first_children",
    "draft_forest",
    "verifier_names",
    "canonical_verifier",
    "TreeVerifier",
    "TREE_VERIFIERS",
    "tree_optimum",
    "TreeOptimum",
    "upper_bound",
    "mean_upper_bound",
    "certified_rules",
    "default_rule",
    "DualHeights",
    "RULES",
    "LPTreeVerifier",
    "compare_tree",
    "TreeComparison",
    "TreeComparisonRecord",
    "enumerate_trees",
    "estimate_tree_size",
    "TreeEnumeration",
    "NextTokenLaw",
    "model_law",
    "toy_models",
]
