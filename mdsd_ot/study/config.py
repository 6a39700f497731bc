"""What a study computes: schemes, verifiers, temperatures, n, subsampling (:class:`StudyConfig`)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from .. import _store
from ..keys import verifier_applies as _verifier_applies  # noqa: F401  (mdsd_ot.study._verifier_applies)
from ..keys import verifier_scheme  # noqa: F401  (mdsd_ot.study.verifier_scheme: the bound a verifier is compared with)
from ..plots import in_family_order
from ..verifiers import DEFAULT_VERIFIERS as _REGISTRY_DEFAULTS

#: Warning category for damaged, incomplete or unverifiable study folders (handled, never silent).
StudyWarning = _store.StoreWarning


#: Draft-sampling schemes whose bound the study evaluates.
SCHEMES = ("with_replacement", "without_replacement", "greedy")


#: Verifiers evaluated by default: :data:`mdsd_ot.verifiers.DEFAULT_VERIFIERS` (the one list, derived
#: from the registry), spelled in the figures' family order (:func:`mdsd_ot.plots.in_family_order`).
#: :meth:`StudyConfig.validate` sorts the names, so the order never reaches a stored file.
DEFAULT_VERIFIERS = in_family_order(_REGISTRY_DEFAULTS)


@dataclass
class StudyConfig:
    """Parameters of a study (saved to ``config.json``).

    Attributes
    ----------
    temperatures : list of float
        Applied to both models' logits (each captured from the logits, before truncation).
    ns : list of int
        Numbers of drafts.
    schemes : list of str
        Bounds to evaluate, a subset of :data:`SCHEMES`.
    verifiers : list of str
        Verifier names of ``mdsd_ot.VERIFIERS``.
    top_k, top_p : int or float or None
        Truncation applied to both p and q after the temperature (see
        :func:`mdsd_ot.backends.torch.to_distribution`).
    max_records : int or None
        Use the first ``max_records`` prompts (before sharding).
    max_positions_per_record : int or None
        Use the first positions of each continuation only.
    continuation : {"given", "sample"}
        Teacher-force the records' own continuations, or sample one from the target first.
    max_new_tokens, sample_temperature : int, float
        For ``continuation="sample"``.
    seed : int
        Seed of the sampled continuations and of Monte Carlo verifiers.
    bound_backend : {"auto", "numpy", "torch"}
        Every row comes from the evaluation plan (:mod:`mdsd_ot.plan`: one sort per position, every
        certificate re-checked). ``numpy``: the numpy plan per position. ``torch``: the batched torch
        plan (:func:`mdsd_ot.backends.torch.evaluate_batch`, one pass per prompt and temperature on the
        tensors' device) for the bounds with replacement, without replacement n <= 2, greedy, and
        the closed-form verifiers; the rest by the numpy plan. ``auto``: ``torch`` when the tensors
        are on an accelerator, ``numpy`` on CPU (faster there), and the first position of each
        prompt re-checked against the numpy plan (to ``VALUE_TOL``).
    every : dict
        ``{method-key prefix: K}``: evaluate expensive methods at every K-th position only
        (see :func:`parse_every`), e.g. ``{"bound:without_replacement@3": 8}``.
    mc_samples : int or None
        Monte Carlo draft tuples for verifiers without an exact form at this size (default: the
        verifier module's default).
    """

    temperatures: list = field(default_factory=lambda: [0.3, 0.5, 0.7, 1.0])
    ns: list = field(default_factory=lambda: [2, 3, 4])
    schemes: list = field(default_factory=lambda: list(SCHEMES))
    verifiers: list = field(default_factory=lambda: list(DEFAULT_VERIFIERS))
    top_k: int | None = None
    top_p: float | None = None
    max_records: int | None = None
    max_positions_per_record: int | None = None
    continuation: str = "given"
    max_new_tokens: int = 64
    sample_temperature: float = 1.0
    seed: int = 0
    bound_backend: str = "auto"
    every: dict = field(default_factory=dict)
    mc_samples: int | None = None

    def validate(self) -> StudyConfig:
        """Check the fields and put the lists in a canonical order; return self.

        Temperatures and n are sorted, schemes follow :data:`SCHEMES`, verifiers are sorted, and
        repeats are dropped: the lists are sets (``--n 3,2`` and ``--n 2,3`` are one study, with
        the same rows and the same bytes in every output file).
        """
        from .._validate import check_choice, check_n

        if not self.temperatures:
            raise ValueError("give at least one temperature")
        for t in self.temperatures:
            if not (isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and t > 0):
                raise ValueError(f"temperatures must be finite floats > 0, got {t!r}")
        self.temperatures = sorted({float(t) for t in self.temperatures})
        if not self.ns:
            raise ValueError("give at least one n")
        self.ns = sorted({check_n(n) for n in self.ns})
        from ..drafts import get_scheme

        chosen = set()
        for s in self.schemes:  # aliases and any case: canonical names, then the study's own list
            name = get_scheme(s).name if isinstance(s, str) else s
            check_choice(name, "scheme", SCHEMES)
            chosen.add(name)
        self.schemes = [s for s in SCHEMES if s in chosen]
        check_choice(self.continuation, "continuation", ("given", "sample"))
        check_choice(self.bound_backend, "bound_backend", ("auto", "numpy", "torch"))
        self.verifiers = sorted(set(check_verifier_names(self.verifiers)))
        self.every = parse_every(self.every)
        if self.mc_samples is not None:
            from ..verifiers import DEFAULT_SAMPLES

            m = self.mc_samples
            if isinstance(m, bool) or not isinstance(m, int) or m < 1:
                raise ValueError(f"mc_samples must be an integer >= 1 or None, got {m!r}")
            # the identity records what the option resolves to: the default spelled out is the default
            self.mc_samples = None if m == DEFAULT_SAMPLES else int(m)
        return self

    def key(self) -> dict:
        """The parameters that determine a row: part of the study identity (:func:`study_identity`).

        Left out because they change no row beyond floating-point rounding or only select which
        records are processed: ``max_records`` (the records before sharding; a resume may extend or
        shorten the list), ``bound_backend`` (agrees with numpy to ``VALUE_TOL``).
        """
        d = asdict(self)
        return {
            k: d[k]
            for k in (
                "temperatures",
                "ns",
                "schemes",
                "verifiers",
                "top_k",
                "top_p",
                "max_positions_per_record",
                "continuation",
                "max_new_tokens",
                "sample_temperature",
                "seed",
                "every",
                "mc_samples",
            )
        }


def check_verifier_names(names) -> list:
    """Registry names of ``names`` (aliases and any case accepted); ``ValueError`` listing the
    registry for an unknown one."""
    from ..verifiers import VERIFIERS, get_verifier

    names = list(names)
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise ValueError(f"unknown verifier {bad[0]!r}; choose among {sorted(VERIFIERS)}")
    return [get_verifier(n).name for n in names]  # aliases and any case: registry names


def parse_every(spec) -> dict:
    """``"bound:without_replacement@3=8,verifier:rrs_without_replacement=4"`` -> {pattern: K}."""
    if not spec:
        return {}
    if isinstance(spec, dict):
        items = spec.items()
    else:
        items = []
        for part in str(spec).split(","):
            if not part.strip():
                continue
            if "=" not in part:
                raise ValueError(f"--every entries look like 'bound:without_replacement@3=8', got {part!r}")
            pat, k = part.rsplit("=", 1)
            items.append((pat.strip(), k))
    out = {}
    for pat, k in items:
        try:
            k = int(k)
        except ValueError:
            raise ValueError(f"subsampling step for {pat!r} must be an int, got {k!r}") from None
        if k < 0:
            raise ValueError(f"subsampling step for {pat!r} must be >= 0 (0 = never), got {k}")
        out[str(pat)] = k
    return out


def _step(key: str, every: dict) -> int:
    """Subsampling step of a method key: the longest matching prefix pattern wins (default 1)."""
    best, step = -1, 1
    for pat, k in every.items():
        if key.startswith(pat) and len(pat) > best:
            best, step = len(pat), k
    return step


def _skip(key: str, every: dict, position: int) -> bool:
    """True when ``key`` is not evaluated at ``position`` (step 0: never)."""
    step = _step(key, every)
    return step == 0 or position % step != 0
