"""Tree forwards of Hugging Face causal LMs with a KV cache and a tree attention mask.

:class:`TreeLM` keeps one model's KV cache of the committed tokens (prompt and every emitted token)
and runs a forward over the committed tokens not yet cached plus any set of draft-tree nodes:

* keys/values in the cache: ``[committed (C)] [tree nodes of this call (T)]``; the input of a forward
  is ``[pending committed (P)] [new tree nodes (M)]``;
* a pending token attends to the committed tokens up to itself; a tree node attends to every
  committed token, to its ancestors in the tree and to itself (a 4-D additive attention mask);
* a node at depth ``d`` gets the position ``C + P + d - 1``, as if its path had been appended;
* :meth:`TreeLM.commit` drops the tree's keys/values (``cache.crop``) and queues the emitted tokens,
  which the next forward processes first. Each emitted token is thus processed once more than with
  a cache that keeps the accepted path (at most ``depth + 1`` extra positions per call, in the same
  forward as the next tree); no cache reordering is needed.

Nodes are identified by their path (the tuple of drafted tokens below the root): repeated drafts
(i.i.d. drafting) share one position, since equal paths have equal laws.

``tests/test_decode.py`` checks every node's logits against a plain forward of the prompt plus the
node's path, for Qwen2 and Llama configurations.
"""

from __future__ import annotations

import inspect

__all__ = ["TreeLM"]


def _torch():
    from ..backends.torch import require_torch

    return require_torch()


class TreeLM:
    """One causal LM with a KV cache of the committed tokens and tree forwards on top of it.

    Parameters
    ----------
    model : transformers causal LM (``model(input_ids, attention_mask, position_ids, cache) -> .logits``)
    """

    def __init__(self, model):
        torch = _torch()
        self.torch = torch
        self.model = model
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        params = inspect.signature(model.forward).parameters
        # transformers >= 5 names the KV cache argument ``cache``; older versions ``past_key_values``
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self.forwards = 0
        self.positions = 0
        self.reset([])

    def reset(self, prompt_ids) -> None:
        """Start a new sequence: an empty cache and the prompt as pending committed tokens."""
        from transformers import DynamicCache

        try:
            self.cache = DynamicCache(config=self.model.config)
        except TypeError:  # older transformers: no config argument
            self.cache = DynamicCache()
        self.committed = 0  # committed tokens whose keys/values are cached
        self.pending = [int(t) for t in prompt_ids]
        self.slots: dict = {}  # tree path -> index among the cached tree nodes
        self.tree_len = 0

    def commit(self, tokens) -> None:
        """Drop this call's tree from the cache and queue ``tokens`` (the emitted ones)."""
        if self.tree_len:
            self.cache.crop(-self.tree_len)  # a negative argument removes that many (every version)
        self.slots, self.tree_len = {}, 0
        self.pending.extend(int(t) for t in tokens)

    def forward(self, paths) -> tuple:
        """Forward the pending committed tokens and the tree nodes ``paths`` (each a tuple of tokens
        below the root; every proper prefix must already be cached or be in ``paths`` before it).

        Returns
        -------
        (root_logits or None, node_logits) : torch tensors ``(V,)`` and ``(len(paths), V)``
            ``root_logits``: the law after the last committed token (None when nothing was pending).
        """
        torch = self.torch
        new = []
        for path in paths:
            path = tuple(int(t) for t in path)
            if path not in self.slots and path not in new:
                new.append(path)
        P, M, C, T0 = len(self.pending), len(new), self.committed, self.tree_len
        if P + M == 0:
            raise ValueError("nothing to forward")
        if P and T0:
            raise ValueError("internal error: committed tokens queued while a tree is cached")
        base = C + P  # committed length after this forward
        where = {path: C + slot for path, slot in self.slots.items()}  # path -> column of its keys/values
        cols = {}
        for j, path in enumerate(new):
            where[path] = C + T0 + P + j
            cols[path] = j
        kv = C + T0 + P + M
        allowed = torch.zeros(P + M, kv, dtype=torch.bool)
        allowed[:, :C] = True
        for i in range(P):
            allowed[i, C + T0 : C + T0 + i + 1] = True
        pos = list(range(C, C + P))
        for j, path in enumerate(new):
            r = P + j
            allowed[r, C + T0 : C + T0 + P] = True
            for k in range(1, len(path) + 1):
                prefix = path[:k]
                if prefix not in where:
                    raise ValueError(f"tree node {path}: its ancestor {prefix} was never forwarded")
                allowed[r, where[prefix]] = True
            pos.append(base + len(path) - 1)
        mask = torch.zeros(P + M, kv, dtype=self.dtype)
        mask.masked_fill_(~allowed, torch.finfo(self.dtype).min)
        ids = torch.tensor([self.pending + [p[-1] for p in new]], device=self.device)
        kwargs = {
            "input_ids": ids,
            "attention_mask": mask[None, None].to(self.device),
            "position_ids": torch.tensor([pos], device=self.device),
            "use_cache": True,
            self._cache_arg: self.cache,
        }
        with torch.inference_mode():
            logits = self.model(**kwargs).logits[0]
        self.forwards += 1
        self.positions += P + M
        self.committed, self.pending = base, []
        for path in new:
            self.slots[path] = self.tree_len
            self.tree_len += 1
        root = logits[P - 1] if P else None
        rows = logits[P:]
        index = [cols[tuple(int(t) for t in p)] if tuple(int(t) for t in p) in cols else -1 for p in paths]
        if any(i < 0 for i in index):
            raise ValueError("internal error: a requested tree node was forwarded in an earlier call")
        return root, rows[index]
