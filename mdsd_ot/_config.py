"""Named tolerances and size thresholds, shared by the code and the tests."""

#: Largest allowed ``|sum(x) - 1|`` for a distribution passed without ``normalize=True``.
SUM_TOL = 1e-6

#: Agreement required between two exact methods (dual, LP, cvxpy, brute force).
VALUE_TOL = 1e-9

#: Agreement required between an exact output law and the target ``p``.
LAW_TOL = 1e-12

#: Tolerance for re-checking the certificate of an LP value (the objective recomputed independently);
#: the LP solver's own tolerance is LP_SOLVER_TOL.
CERT_TOL = 1e-9

#: Tolerance for re-checking the certificate of an exact value (dual, brute force): the objective
#: p(H) + 1 - Q(H) recomputed independently must agree to this.
RECHECK_TOL = 1e-12

#: How often the quadrature step of sequential sampling (n >= 3) is halved, at most, when the solver's
#: value and the independent re-evaluation on the finer grid disagree by more than RECHECK_TOL.
QUAD_MAX_REFINE = 3

#: Feasibility / optimality tolerance handed to HiGHS.
LP_SOLVER_TOL = 1e-10

#: Number of LP columns above which HiGHS uses interior point instead of dual simplex.
IPM_COLUMNS = 100_000

#: Largest number of LP columns we agree to build (beyond it: use the dual).
LP_MAX_COLUMNS = 20_000_000

#: Largest dense transport plan (draft sets x tokens) the LP path returns: 2^27 float64 entries, 1 GiB
#: (beyond it: use the dual; the plan of the 151,936 one-token sets of n = 1 at V = 151,936 is 172 GiB).
LP_PLAN_MAX_ENTRIES = 1 << 27

#: Largest vocabulary for exhaustive subset enumeration (2**V subsets).
BRUTEFORCE_MAX_V = 20

#: Largest number of ordered draft tuples an exact enumeration may visit.
ENUMERATION_MAX_TUPLES = 5_000_000

#: The trapezoid rule in s = log t for the exponential-clock integral of W_n uses the step
#: QUAD_STEP / sqrt(n + 1): the integrand's sharpest rise has width about 1/sqrt(n) in s. Calibrated on
#: the sharpest integrands (Poisson and binomial counts, every outside mass): error <= 1e-13 at 0.5,
#: 4e-12 at 0.6 (docs/math.md#quadrature-step). Each value is re-checked on a grid shifted by half a step.
QUAD_STEP = 0.5

#: Tail of the exponential-clock integral left out at each end of the quadrature grid.
QUAD_TAIL = 1e-17

#: Slack when pruning bins of the binned scan with exact bounds (never prunes the optimum).
PRUNE_MARGIN = 1e-12

#: The binned scan does not look into a bin (or sub-bin) whose q mass could raise the excess by at
#: most this above its value at the bin's start, a boundary it evaluates: the value returned stays
#: within GAIN_FLOOR (plus rounding, ~1e-16) of the maximum over every prefix. Without it a run of
#: masses far below rounding (subnormal tails), where every prefix ties to the last bit, is scanned
#: token by token (docs/math.md#pruning).
GAIN_FLOOR = 2.0**-64

#: Sequential sampling, n >= 3: prefixes whose upper bound cannot beat the best excess found by more
#: than this are skipped, so the value returned is within PRUNE_SLACK (plus the ~1e-15 quadrature
#: error) of the exact optimum. Without it, near-flat excess curves (p close to q, near one-hot
#: distributions) would need every prefix evaluated.
PRUNE_SLACK = 1e-13

#: Sequential sampling, n >= 3: absolute allowance for the quadrature error of ``X - W`` (both of size
#: at most 2) in the slopes that bound W_n between two evaluated prefixes (docs/math.md#pruning); the
#: fast path's error in them is about 1e-14.
PRUNE_SLOPE_MARGIN = 1e-11

#: Prefixes evaluated exactly per pruning round of the without-replacement scan (n >= 3).
PRUNE_BATCH = 32

#: Doubles of per-node DP states one pruning round keeps, so that the next round resumes each node's
#: DP where the remaining prefixes begin (states are saved at every k-th evaluated prefix to fit).
PRUNE_STATES = 1_000_000

#: A pruning round keeps the band power sums of a saved prefix only where at least this many tokens
#: lie since the last kept ones (a copy of the sums costs about as much as adding 60 tokens); the
#: next round re-adds the tokens in between, the same sums in the same order.
PRUNE_SUMS_GAP = 256

#: Above this many drafts (and when q(H) > 1/2), q(H)^n is computed as exp(n log1p(-R)) from the outside
#: mass R, summed directly: x^n multiplies the relative rounding error of x by n (~1e-7 at n = 10^9);
#: below it, n eps <= 7e-15 (docs/math.md#with-replacement).
POWER_FROM_REST_N = 64

#: Up to this many drafts the evaluation plan's naive verifier takes 1 - (1 - q)^n as
#: q (1 + m + ... + m^(n-1)) with m = 1 - q summed directly (positive terms: about n ulps, no
#: logarithm per token); above it, -expm1(n log m) (docs/math.md#evaluation-plan).
NAIVE_POLY_MAX_N = 64

#: Block length of the evaluation plan's blocked sums: non-negative terms added in any order inside a
#: block (SIMD), blocks accumulated with compensation; error <= (PLAN_BLOCK - 1) eps of the sum.
PLAN_BLOCK = 128

#: Runs of at most this many tokens are sorted by insertion, longer ones by a radix sort on the bits of
#: q/p (the buckets of the plan's order pass; the binned scan sorts its leaves of at most REFINE_MIN
#: tokens by insertion). Speed only: both sorts are stable, so they give the same order.
INSERTION_MAX = 32

#: Bins per token (at most) of the evaluation plan's bucket sort by q/p: more bins leave fewer tokens
#: to sort inside each, at the cost of a larger count array (4 bytes a bin).
ORDER_BINS_PER_TOKEN = 2

#: The evaluation plan keeps its O(V) work arrays between calls (per thread) up to this vocabulary
#: size; above it they are allocated per call.
PLAN_WORKSPACE_MAX_V = 1 << 19

#: The sequential scan (n >= 3) keeps its O(V) work arrays between calls (per thread) up to this
#: vocabulary size; above it they are allocated per call.
SEQUENTIAL_WORKSPACE_MAX_V = 1 << 19

#: Vocabulary size from which the binned prefix scan (O(V) plus ~16k bins) replaces a full sort.
BINNED_MIN_V = 16_384

#: Optimal verifier at full V (i.i.d. drafts): tokens of one hull block are pooled into a run of
#: constant target ``r/q`` only while the run's mean stays this relative margin clear of every token's
#: ``p/q`` (above it where the block slope is >= 1, below it where < 1), so that rounding in the
#: realised rule cannot flip the sign of ``r - p`` (docs/math.md#optimal-verifier-full-v).
POOL_MARGIN = 1e-9

#: Optimal verifier at full V: the join levels of the drafts are range maxima of the units' death
#: levels; when no hull block has more than this many units they are found by scanning (each scan
#: stops at the block's end), otherwise from a segment tree built once per ``prepare``.
CHAIN_SCAN_MAX_UNITS = 64

#: Largest distance outside [0, 1] of an acceptance rate (or a per-tuple acceptance probability) that
#: is treated as rounding and clipped; a larger excursion is an internal error, raised, never hidden.
UNIT_ROUNDING_TOL = 1e-12

#: Largest ``samples * n`` (draft tokens drawn) of one Monte Carlo acceptance estimate: the draft
#: tuples are held as a ``(samples, n)`` array (~16 bytes per token with the uniforms behind them).
MAX_MONTE_CARLO_DRAWS = 20_000_000

#: Largest number of float64 entries the cached RRS residual chain may hold (chain length times V);
#: the chain stops growing at its fixed point, so only long non-stationary chains hit it.
RRS_MAX_CHAIN_ENTRIES = 50_000_000

# -- sequential sampling, fast path (docs/math.md#small-tokens) --------------------------------------

#: A token with q t above this at a quadrature node is "big" (the exact DP); below, its count enters
#: through the cut logarithmic series, whose terms shrink like (e^SMALL_QT - 1)^j.
SMALL_QT = 0.05

#: Terms kept of that series: (e^SMALL_QT - 1)^LOG_TERMS = 1.7e-17 of the leading term.
LOG_TERMS = 13

#: A probability P(N < n) or a node weight below this is dropped: at most 1e-18 of W_n in all.
SATURATED = 1e-18

#: Sequential sampling, n >= 3, fast path: a quadrature node whose terms for a prefix are provably below
#: ``NODE_FLOOR`` times the step (the node's weight times ``lam^m / m!``, a bound on the probability
#: that ``m`` more tokens ring, docs/math.md#small-tokens) is not evaluated for it; the terms left out
#: add up to at most ``NODE_FLOOR`` per unit of ``log t``, under ``8e-18`` over the whole grid.
NODE_FLOOR = 1e-20

#: A clock with q t at least this has rung by t: up to e^-40 = 4e-18 per token.
CERTAIN_QT = 40.0

#: Power-of-two bands of q for the small tokens' power sums, band b holding q in (2^-(b+1), 2^-b]: one
#: band per binary exponent of a positive float64, subnormals included (q >= 2^-1074), so that a token
#: is small at every node where q t <= SMALL_QT. (With 80 bands the last one also held every q below
#: 2^-79, whose tokens were then walked one by one, exactly, at every node beyond t = SMALL_QT 2^79:
#: seconds per call on drafts with a block of tiny masses; docs/math.md#small-tokens.) Tables hold
#: only the bands in use.
NBANDS = 1075

#: From this many tokens on, the k most likely tokens of a draft (top-n and greedy drafts) are found by
#: one pass keeping a heap of the best k (``_kernels.top_k_tokens``) instead of ``np.argpartition``,
#: whose selection degenerates where most masses tie (3x an argsort at V = 152,064). Below, numpy
#: (no kernel to compile on a first call). Speed only: the same tokens in the same order.
TOP_HEAP_MIN_V = 4096

#: A quadrature node of the fast path with more big tokens than this share of the prefix finds them
#: by their bands as it walks instead of a prepared list (the lists are cumulative over the nodes).
#: Speed only: the tokens and their order are the same either way.
BIG_LIST_MAX_SHARE = 0.25

# -- binned scan, batches, first calls ----------------------------------------------------------------

#: Most bins of q/p in the binned scan (up to 256 per octave over the occupied range of q/p): their sums
#: (48 bytes a bin) stay in a core's L2 cache while the tokens are added in random bin order (2^16 bins,
#: 3 MB, cost 0.4x an argsort at V = 152,064 where the ratios span hundreds of octaves); the few
#: candidate bins are refined (REFINE_MIN), so coarser bins cost little.
BIN_BUDGET = 1 << 13

#: The binned scan looks into a candidate bin of more than this many tokens by binning it again on
#: the next bits of its own range of q/p (REFINE_BINS sub-bins at most, recursively) instead of
#: sorting it; shorter runs are sorted and scanned. Speed only: every prefix either is evaluated or
#: has an upper bound below an attained excess by PRUNE_MARGIN.
REFINE_MIN = 64

#: Most sub-bins per refinement of a candidate bin of the binned scan (REFINE_MIN).
REFINE_BINS = 1 << 11

#: Batches with fewer entries (rows x vocabulary) than this run row by row, without the row-parallel
#: kernels (which take seconds to compile on a first call).
PARALLEL_MIN_ENTRIES = 1 << 16

#: ``optimal_acceptance_batch`` keeps its normalised copies of p and q per thread between calls up to
#: this many entries each (8 MB): fresh arrays are page faults of the whole batch at every call.
BATCH_BUFFER_MAX_ENTRIES = 1 << 20

#: Up to this vocabulary size the prefix scans run their Python bodies instead of compiling them.
PYTHON_MAX_V = 256

#: The full-V optimal verifier sorts its tokens by the faster of two exact routes on the machine (the
#: same order): chosen once per process by timing both on the first vocabulary at least this large.
ORDER_TIMING_MIN_V = 1 << 14

#: Seconds a kernel's Python body may run in one process (small inputs, ``PYTHON_MAX_V``) before the
#: kernel is compiled instead, for a kernel outside the families of ``mdsd_ot._compile`` (a family's
#: kernel switches after its own measured compile time): a loop of small calls (the demo's exact RSD
#: recursion, 52,000 calls of a 33-token kernel) then pays at most about twice the cheaper of running
#: the Python body and compiling once (the ski-rental rule). Speed only: both give the same bits.
PYTHON_TWIN_BUDGET_S = 2.0

#: RSD path Monte Carlo: below this undrafted mass (above its inverse for theta) the theta form is left
#: for explicit residual arrays (theta + E / M would overflow).
THETA_SAFE = 1e290

# -- logits to distributions (mdsd_ot.to_distribution, mdsd_ot.backends.torch.to_distribution) ------

#: top-p: a prefix of the sorted tokens whose mass lies within this much below ``top_p`` counts as
#: reaching it. The masses are float64 softmax outputs whose last bits depend on the engine (numpy
#: and torch differ by up to 2e-15 at V = 152,064), so without a band a ``top_p`` equal to a
#: cumulative mass (0.75 after masses 0.5, 0.25) kept 2 tokens in one engine and 3 in the other.
TOP_P_TIE = 1e-12

# -- draft trees (mdsd_ot.trees, mdsd_ot.decode) -----------------------------------------------------

#: Largest number of draft tokens (nodes below the root) a draft tree may hold: every node is one
#: position of the target's forward pass, so a larger tree is almost certainly a typo ("8,8,8,8,8").
MAX_TREE_NODES = 4096

#: The decoder evaluates a verifier that needs an LP for the tree's draft scheme (``optimal`` under
#: sequential, conditional-Poisson or top-n drafts: one LP per tree node) only up to this vocabulary
#: size (``mdsd_ot.decode.runner.runs_at``); beyond it it is not evaluated. Under
#: i.i.d., greedy and hub drafts ``optimal`` has a full-vocabulary construction and always runs.
DECODE_OPTIMAL_MAX_V = 64

# -- scaling out (mdsd_ot.scale) ------------------------------------------------------------------------

#: Default shards per task slot of the cluster: a retried shard repeats at most 1/4 of a slot's share,
#: and faster workers take more shards.
SCALE_SHARDS_PER_SLOT = 4

#: Seconds between two looks of the driver at the shards (progress bar, finished tasks).
SCALE_POLL_S = 0.5

#: Seconds a retried shard waits for the lock of its folder (held by an earlier attempt still alive
#: on a node Ray declared lost) before it fails.
SCALE_LOCK_WAIT_S = 120.0

# -- the exact tree optimum (mdsd_ot.trees.tree_optimum, compare_tree) -------------------------------

#: Most path-set classes of drafted trees the causal LP of ``tree_optimum`` is built for: its size is
#: about (classes x paths per class x V) columns (docs/math.md#the-exact-tree-optimum).
TREE_OPTIMUM_MAX_CLASSES = 4000

#: Most state expansions of the level-by-level enumeration of drafted trees (``trees.enumerate``).
TREE_ENUMERATION_MAX = 1_000_000

#: Most ordered drafted trees ``compare_tree`` evaluates every verifier on (one recursion per tree).
TREE_COMPARE_MAX_TREES = 50_000

#: Most causal-LP columns ``mdsd-ot trees`` builds (its ``--max-columns``), checked on the size estimate
#: before anything is enumerated: 196,141 columns took 11 s of HiGHS, and one class of a wide shape at a
#: large vocabulary can ask for hundreds of millions.
TREE_OPTIMUM_MAX_COLUMNS = 2_000_000

#: ``mdsd-ot trees`` prints a one-line note before it starts when its estimate of the work exceeds this
#: many seconds; the estimate takes TREE_SECONDS_PER_COLUMN per LP column and TREE_SECONDS_PER_TREE per
#: ordered tree (measured on one core of an AMD EPYC: 22-33 us per column from 16k to 75k columns,
#: 0.7 ms per ordered tree with five verifiers).
TREE_NOTE_SECONDS = 5.0
TREE_SECONDS_PER_COLUMN = 4e-5
TREE_SECONDS_PER_TREE = 7e-4

#: Columns of the causal LP above which HiGHS runs interior point (with crossover) instead of simplex.
TREE_LP_IPM_COLUMNS = 10_000

#: The causal LP's rows go to HiGHS multiplied by these factors in turn, until a solution passes every
#: re-check: HiGHS's feasibility tolerance is absolute (1e-10 at best), so a factor s enforces the rows
#: to 1e-10 / s, which the plans of drafted trees rarer than 1e-10 need for an emitted law exact to
#: LAW_TOL; a large factor can leave a solver without a verdict on some inputs, hence the list (the
#: solver chosen by size first, then the other one, then the first with presolve).
TREE_LP_ROW_SCALES = (1e6, 1e3, 1e9, 1.0)

#: The causal LP's re-checks: largest violation of a class total and of x >= 0 accepted from the
#: solver's plan (the emitted law itself must match the target's to LAW_TOL, and the dual bound the
#: plan's value to VALUE_TOL).
TREE_LP_FEAS_TOL = 1e-10

#: Interior-point iterations per attempt of the causal LP (solves took 28-37; without presolve it
#: failed to stop on some tiny scaled inputs, so an attempt gives up here and the next one runs).
TREE_LP_IPM_ITERATIONS = 500

#: Seconds HiGHS may take per attempt of the causal LP before the attempt counts as failed (the
#: largest allowed LPs took about 10 s; a safeguard against a solver that does not stop).
TREE_LP_TIME_LIMIT_S = 300.0
