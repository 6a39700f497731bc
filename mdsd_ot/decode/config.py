"""What a decoding run computes (:class:`DecodeConfig`): trees, schemes, temperatures, verifiers."""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, field

from .._validate import check_choice
from ..drafts import SCHEMES
from ..trees import parse_shape, valid_verifiers

__all__ = ["DecodeConfig", "DEFAULT_DRIVER", "driver_for"]

#: Version of the rows' meaning, part of the identity so that a folder is never resumed with rows of
#: another meaning: 2 = the last call's tokens cut to ``max_new_tokens`` (``truncated``); folders
#: written before (no ``row_format``) let the last call overshoot.
ROW_FORMAT = 2

#: Row format of union runs (``union=True``): one row per (call, cell), every cell evaluated at the
#: driving cell's calls (docs/math.md#union-trees).
UNION_ROW_FORMAT = 3

#: The driver of a scheme without a verifier built for it (``DraftScheme.reference_verifier`` None):
#: ``naive`` is valid under every draft scheme.
FALLBACK_DRIVER = "naive"

#: The verifier whose sample continues the decoding, per draft scheme: the scheme's own verifier
#: (``DraftScheme.reference_verifier``; ``naive`` for deterministic ``top_n`` drafts, where it attains
#: alpha* = p(Top_n)), else :data:`FALLBACK_DRIVER`. Every other valid verifier is evaluated exactly on
#: the same trees.
DEFAULT_DRIVER = {name: s.reference_verifier or FALLBACK_DRIVER for name, s in SCHEMES.items()}


def driver_for(scheme: str, driver: str | None, shape=None) -> str:
    """The driving verifier for ``scheme`` (``driver`` when given, which must be valid for it; with
    ``shape``, a tree-level verifier of that shape may drive too, e.g. ``traversal``).

    Parameters
    ----------
    scheme : str
        Canonical draft scheme name (a key of :data:`DEFAULT_DRIVER`; ``KeyError`` otherwise when
        ``driver`` is None).
    driver : str or None
        Verifier name or alias; None: :data:`DEFAULT_DRIVER` of ``scheme``.
    shape : TreeShape, str or None
        Tree shape; None: only node-wise verifiers may drive.

    Returns
    -------
    str
        Canonical verifier name (``ValueError`` if it is not valid for ``scheme``).
    """
    from ..trees import canonical_verifier

    name = DEFAULT_DRIVER[scheme] if driver is None else canonical_verifier(driver)
    valid = valid_verifiers(scheme, shape=shape)
    if name not in valid:
        raise ValueError(f"driver verifier {name!r} is not valid for {scheme!r} drafts; choose among {valid}")
    return name


@dataclass
class DecodeConfig:
    """Parameters of a tree-decoding run (recorded in ``config.json``; see :func:`mdsd_ot.decode.run_shard`).

    Attributes
    ----------
    target, draft : str or None
        Model folders or hub names (``run_shard`` loads them; ``run_decode`` takes models instead).
    tokenizer : str or None
        Tokenizer source (default: the target's folder).
    prompts : str or list
        ``"humaneval"``, a ``.jsonl`` / text file, or records (see :func:`mdsd_ot.study.load_prompts`).
    trees : list of str
        Tree shapes (``"4x4"``, ``"4,2,2,1"``; :func:`mdsd_ot.trees.parse_shape`).
    schemes : list of str
        Draft schemes (every tree is drafted with each).
    temperatures : list of float
        Applied to both models' logits (then ``top_k`` / ``top_p``).
    verifiers : list of str or None
        Verifiers evaluated exactly at every call (those valid for each scheme); None: all valid ones.
        ``optimal`` (an LP per node) only runs on small vocabularies.
    driver : str or None
        The verifier whose sample continues decoding (default :data:`DEFAULT_DRIVER` per scheme).
    union : bool
        One decoding per (prompt, temperature) for every (tree, scheme) cell at once: at each target
        call, one tree per scheme with nested draws (``DraftScheme.nested_draws``) of the union shape
        of ``trees``, whose first-children sub-trees are the cells' trees, plus the own trees of the
        other schemes, all in one draft pass per depth and one target forward
        (docs/math.md#union-trees). The continuation follows the ``drive`` cell's ``driver``; every
        other cell is evaluated exactly at the same calls. False: every cell decodes its own
        continuation (one target forward per cell and call).
    drive : str or None
        ``"TREE/SCHEME"``: the cell whose sample continues decoding in a union run (default: the
        largest tree, the first scheme).
    bound : bool
        Also record the node-alpha* heuristic (:func:`mdsd_ot.trees.node_alpha_heuristic`): neither a bound
        nor an estimate of the optimum (docs/math.md#tree-bound-estimate); off by default.
    max_new_tokens : int
        Tokens to generate per prompt and cell (EOS stops earlier). The last call's tokens are cut to
        fit; its row keeps the sampled count in ``emitted`` and the cut in ``truncated``.
    max_records : int or None
        The first prompts only (before sharding).
    top_k, top_p, seed, device, dtype, threads
        As in the study; ``device``, ``threads`` and ``max_records`` are not part of the identity.
    """

    target: str | None = None
    draft: str | None = None
    tokenizer: str | None = None
    prompts: object = "humaneval"
    trees: list = field(default_factory=lambda: ["1x4", "2x4", "4x4", "4x3", "4,2,2,1"])
    schemes: list = field(default_factory=lambda: ["with_replacement"])
    temperatures: list = field(default_factory=lambda: [0.3, 0.7, 1.0])
    verifiers: list | None = None
    driver: str | None = None
    union: bool = True
    drive: str | None = None
    bound: bool = False
    max_new_tokens: int = 64
    max_records: int | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0
    device: str = "auto"
    dtype: str = "float32"
    threads: int | None = None

    def validate(self) -> DecodeConfig:
        """Check and normalise every field (``ValueError`` / ``TypeError`` naming the field)."""
        if isinstance(self.trees, str):
            self.trees = [self.trees]
        if not self.trees:
            raise ValueError("trees: give at least one tree shape, e.g. ['4x4']")
        self.trees = [parse_shape(t).label for t in self.trees]
        self.trees = sorted(set(self.trees), key=self.trees.index)
        if isinstance(self.schemes, str):
            self.schemes = [self.schemes]
        if not self.schemes:
            raise ValueError("schemes: give at least one draft scheme")
        self.schemes = [check_choice(s, "scheme", SCHEMES) for s in self.schemes]
        self.schemes = sorted(set(self.schemes), key=self.schemes.index)
        for s in self.schemes:
            fixed = SCHEMES[s].fixed_n  # a scheme defined for one number of drafts only (hub: 2)
            if fixed is not None:
                bad = [t for t in self.trees if set(parse_shape(t).branching) != {fixed}]
                if bad:
                    raise ValueError(
                        f"the {s!r} scheme drafts exactly {fixed} children per node; trees {bad} do not"
                    )
            if not self.union:
                driver_for(s, self.driver)
        temps = (
            [self.temperatures] if isinstance(self.temperatures, numbers.Real) else list(self.temperatures)
        )
        if not temps:
            raise ValueError("temperatures: give at least one")
        for T in temps:
            if isinstance(T, bool) or not isinstance(T, numbers.Real) or not (math.isfinite(T) and T > 0):
                raise ValueError(f"temperatures must be finite numbers > 0, got {T!r}")
        self.temperatures = sorted({float(T) for T in temps})
        if self.verifiers is not None:
            from ..trees import canonical_verifier, verifier_names

            if isinstance(self.verifiers, str):
                self.verifiers = [v.strip() for v in self.verifiers.split(",") if v.strip()]
            self.verifiers = sorted({canonical_verifier(v) for v in self.verifiers})
            if not self.verifiers:
                raise ValueError(
                    "verifiers: name at least one verifier (e.g. 'rrs,traversal'), or leave them out "
                    "for every valid one"
                )
            # spelled out as the default (every name, or exactly what the default evaluates in every
            # cell): the same run, the same identity
            if self.verifiers == sorted(verifier_names()) or self.same_verifiers(None):
                self.verifiers = None
        for name, lo in (("max_new_tokens", 1), ("seed", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo:
                raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
        if self.max_records is not None and (
            isinstance(self.max_records, bool)
            or not isinstance(self.max_records, numbers.Integral)
            or self.max_records < 1
        ):
            raise ValueError(f"max_records must be an int >= 1 or None, got {self.max_records!r}")
        if self.top_k is not None and (
            isinstance(self.top_k, bool) or not isinstance(self.top_k, numbers.Integral) or self.top_k < 1
        ):
            raise ValueError(f"top_k must be an int >= 1 or None, got {self.top_k!r}")
        if self.top_p is not None and not (isinstance(self.top_p, numbers.Real) and 0 < self.top_p <= 1):
            raise ValueError(f"top_p must lie in (0, 1] or be None, got {self.top_p!r}")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"dtype must be float32, bfloat16 or float16, got {self.dtype!r}")
        if self.top_k is not None:
            widest = max(max(parse_shape(t).branching) for t in self.trees)
            if self.top_k < widest:
                raise ValueError(
                    f"top_k = {self.top_k} keeps fewer tokens than the widest node drafts ({widest}); "
                    f"raise top_k or narrow the trees"
                )
        for name in ("bound", "union"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.union:
            tree, scheme = self.drive_cell()
            self.drive = f"{tree}/{scheme}"
            self.driver = driver_for(
                scheme, self.driver, tree
            )  # resolved: a default spelled out is the same run
        elif self.driver is not None and all(self.driver == DEFAULT_DRIVER[s] for s in self.schemes):
            self.driver = None
        elif self.drive is not None:
            raise ValueError("drive names the driving cell of a union run; it needs union=True")
        return self

    def same_verifiers(self, other) -> bool:
        """True when the verifier list ``other`` (None for the default, or names, e.g. the spelling a
        folder recorded) evaluates the same verifiers as :attr:`verifiers` in every (tree, scheme)
        cell of this run: two spellings of one run (a resume compares these, not the spellings).

        Parameters
        ----------
        other : list of str or None

        Returns
        -------
        bool
            False for names that are not verifiers.
        """
        from ..trees import canonical_verifier

        try:
            other = None if other is None else sorted({canonical_verifier(v) for v in other})
            return all(
                set(valid_verifiers(s, self.verifiers, shape=t)) == set(valid_verifiers(s, other, shape=t))
                for t in self.trees
                for s in self.schemes
            )
        except (TypeError, ValueError):
            return False

    def drive_cell(self) -> tuple:
        """``(tree, scheme)`` whose sample continues a union run (``drive``, else the largest tree and
        the first scheme)."""
        if self.drive is None:
            return max(self.trees, key=lambda t: parse_shape(t).size), self.schemes[0]
        if not isinstance(self.drive, str) or self.drive.count("/") != 1:
            raise ValueError(
                f"drive must read 'TREE/SCHEME' (e.g. '4,2,2,1/with_replacement'), got {self.drive!r}"
            )
        tree, scheme = (x.strip() for x in self.drive.split("/"))
        tree = parse_shape(tree).label
        scheme = check_choice(scheme, "drive scheme", SCHEMES)
        if tree not in self.trees or scheme not in self.schemes:
            raise ValueError(
                f"drive {self.drive!r} is not one of the run's cells: trees {self.trees}, "
                f"schemes {self.schemes}"
            )
        return tree, scheme

    def forest(self) -> list[tuple]:
        """The trees drafted at every call of a union run, as ``(shape label, scheme)``: the union shape
        of ``trees`` once per scheme with nested draws, every tree for the other schemes."""
        from ..trees import union_shape

        out = []
        for s in self.schemes:
            if SCHEMES[s].nested_draws:
                out.append((union_shape(self.trees).label, s))
            else:
                out.extend((t, s) for t in self.trees)
        return out

    def cells(self) -> list[tuple]:
        """Every (temperature, tree, scheme) decoded for each prompt, in a fixed order."""
        return [(T, t, s) for T in self.temperatures for t in self.trees for s in self.schemes]

    def verifiers_for(self, scheme: str, shape=None) -> list[str]:
        """The verifiers evaluated under ``scheme``: the configured ones valid for it, driver included;
        with ``shape``, the tree-level ones (block, traversal) that verify trees of that shape too."""
        names = valid_verifiers(scheme, self.verifiers, shape=shape)
        if self.union:
            tree, drive_scheme = self.drive_cell()
            if (scheme, None if shape is None else parse_shape(shape).label) not in (
                (drive_scheme, tree),
                (drive_scheme, None),
            ):
                return names  # only the driving cell needs the driver
            driver = driver_for(scheme, self.driver, tree)
        else:
            driver = driver_for(scheme, self.driver)
        return names if driver in names else [driver, *names]

    def key(self) -> dict:
        """The parameters that determine a row (part of the folder's identity)."""
        d = asdict(self)
        for k in ("target", "draft", "tokenizer", "prompts", "max_records", "device", "threads"):
            d.pop(k)
        if not self.union:  # the identity of folders written before union runs existed
            d.pop("union")
            d.pop("drive")
        d["row_format"] = UNION_ROW_FORMAT if self.union else ROW_FORMAT
        return d
