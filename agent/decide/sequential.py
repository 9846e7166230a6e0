"""The statistical keep rule: sequential, paired, multi-seed (see docs/decisions.md).

Per candidate: run it on one seed (screen), compare with the incumbent on the same seed,
stop at once when it looks no better (futility); otherwise add one seed at a time, each
paired with an incumbent run on that seed, up to `max_seeds`. Keep only when a one-sided
test of "better than the incumbent" crosses a group-sequential boundary whose looks together
spend at most `alpha` (or the night's LORD++ level), and the estimate is ≥ `min_effect`.

Seed numbering (why it never lets a lucky draw become the bar):
- calibration seeds `0 .. baseline-1` (`baseline_seeds()`): every new incumbent is run on
  them by the loop; candidates never run on them, so they are never selection seeds;
- pairing seeds: incumbent number e of the night (e = keeps so far) pairs its candidates on
  block `1000·(e+1) + j`. The candidate i of that incumbent's reign uses the window
  `start, start+1, ...` with `start = block + i // refresh`, so a fresh incumbent run is added
  every `refresh` candidates (the reference accumulates and drift shows). A kept candidate
  was selected on block e+1's seeds; as the next incumbent it is measured on calibration
  seeds and on block e+2: never again on a seed that selected it. On a deterministic CPU a
  re-run of the same (commit, seed) reproduces the selecting draw, so this disjointness, not
  "fresh processes", is what removes the winner's curse. Reference seeds that equal the
  last keep's seeds are ignored as a second guard.

The night's regime (agent/decide/regime.py; docs/decisions.md "The night's regime"): every decision
records it, and a candidate follows the one its history recorded. Paired (a seed fixes the
run): a keep rests on two pairs, tested on the night's pair spread and on their own (an
edit that redraws a seed's luck shares none of it), at most `paired_max` seeds a candidate;
the incumbent's selecting runs are its references (no calibration stop after a keep), the
screen asks more. Elsewhere: comparisons
rest on incumbent runs close in time (`reference_order`), and confirming seeds are paired
beside the candidate in alternating order (ABBA), so that a drifting machine does not pose
as an effect. In the paired regime a keep that rests on an incumbent run made before the
candidate's waits for the incumbent to run that seed again after it (a bracket), and the
incumbent's value at the candidate's time is interpolated between the two
(`drift.at_candidate_time`).

The estimate combines paired and unpaired incumbent runs by generalized least squares under
`metric = commit level + seed effect (shared) + noise`, with the shared fraction estimated
from the night's paired differences (agent.decide.noise); the boundaries and the estimate are
agent/decide/sequential_math.py. A rule is a pure function of the evidence.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any, Callable

from scipy import special

from agent.decide import drift
from agent.decide import fdr as fdr_module
from agent.decide import noise as noise_module
from agent.decide.decision import DecisionRule, Evidence, RuleSettings, RunMore, SeedPlan
from agent.decide.regime import Regime, measure as measure_regime
from agent.decide.sequential_math import efficacy_boundaries, gls_difference, own_pairs_p, spent_by
from agent.record.events import Comparison, Decision, Verdict

SEED_BLOCK = 1000      # pairing seeds of incumbent e live in [1000(e+1), 1000(e+2))
_LEVEL_GRID = (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0)


@dataclass(frozen=True)
class _Night:
    """What the rule needs to know about the night so far, derived from the history."""

    keeps: int                   # keeps so far = index of the current incumbent's reign
    reign: int                   # decisions since the incumbent was kept
    selected_on: frozenset[int]  # seeds that selected the incumbent (never its reference)
    level: float                 # test level for this candidate (alpha, or LORD++'s)
    regime: Regime = Regime.UNKNOWN   # the regime the last decision measured (fixed per candidate)
    selection: tuple[tuple[int, float], ...] = ()   # the incumbent's selecting runs (seed, value)


@dataclass(frozen=True)
class _OwnPairs:
    """The look's tests once the candidate's own pairs are heard (`SequentialRule._own_pairs`)."""

    p_value: float               # the p a keep is judged on, against the look's boundary
    futile: float                # the p futility is judged on
    agreed: bool = True          # False: the own test forbids a keep at this look
    words: str = ""              # what the reason says of the own test
    details: dict[str, Any] = dataclasses.field(default_factory=dict)


class SequentialRule(DecisionRule):
    """Sequential paired multi-seed rule; see the module docstring and docs/decisions.md.

    `futility = (f_screen, f_later)`: z at or below which a candidate stops (at the screen
    look, at later looks). `spend_power`: shape of the alpha-spending function alpha·t^p
    (larger spends less early). `refresh`: every `refresh`-th candidate of a reign is paired
    with a new incumbent run (the reference grows and drift shows). `pool`: below this many
    incumbent runs every candidate seed is paired; above it, candidate seeds are paired only
    while same-seed runs are shown to share noise (seed_share > 0.1).
    """

    name = "sequential"

    # The settings program.md exposes default to program.md's defaults (one source of truth:
    # benchmarks/keep_rule/decisions.py reports SequentialRule(), the loop runs what program.md says).
    def __init__(self, alpha: float = RuleSettings.alpha, min_effect: float = RuleSettings.min_effect,
                 baseline: int = SeedPlan.baseline, screen: int = SeedPlan.screen,
                 max_seeds: int = SeedPlan.max, fdr: str = RuleSettings.fdr,
                 repeat: int = SeedPlan.repeat,
                 futility: tuple[float, float] = (0.0, 1.0), spend_power: float = 1.5,
                 refresh: int = 8, pool: int = 6, min_keep_seeds: int = 2,
                 lord_horizon: int = 100, regimes: bool = True,
                 paired_futility: tuple[float, float] = (1.25, 1.0),
                 paired_refresh: int = 16, recent: int = 12,
                 blocked: bool = True, paired_max: int = 4) -> None:
        if not 0 < alpha < 1:
            raise ValueError(f"program.md: alpha must be in (0, 1), got {alpha}")
        if not 2 <= baseline < SEED_BLOCK:
            raise ValueError(f"program.md: seeds.baseline must be in [2, {SEED_BLOCK}), got "
                             f"{baseline}; two runs are the least that measure spread")
        if not 1 <= screen <= max_seeds:
            raise ValueError(f"program.md: need 1 <= seeds.screen <= seeds.max, got "
                             f"screen={screen}, max={max_seeds}")
        if max_seeds < min_keep_seeds:
            raise ValueError(f"program.md: seeds.max must be >= {min_keep_seeds}, got {max_seeds}")
        if fdr not in fdr_module.METHODS:
            raise ValueError(f"program.md: fdr must be one of {', '.join(fdr_module.METHODS)}, got {fdr!r}")
        if not 0 <= repeat <= baseline:
            raise ValueError(f"program.md: seeds.repeat must be in [0, seeds.baseline], got {repeat}")
        if min_effect < 0:
            raise ValueError(f"program.md: min_effect must be >= 0, got {min_effect}")
        self.alpha, self.min_effect, self.fdr = alpha, min_effect, fdr
        self.baseline, self.screen, self.max_seeds = baseline, screen, max_seeds
        self.repeat = repeat
        self.futility, self.spend_power = futility, spend_power
        self.refresh, self.pool, self.min_keep_seeds = refresh, pool, min_keep_seeds
        self.lord_horizon = lord_horizon
        self.regimes = regimes    # False: the rule before issue 29 (one design for every night)
        self.paired_futility, self.paired_refresh = paired_futility, paired_refresh
        self.recent = recent      # incumbent runs, latest first, a comparison rests on
        self.blocked = blocked    # pair every confirming seed beside the candidate (drift)
        self.paired_max = paired_max  # seeds a candidate may take in the paired regime

    # ---- seeds and the night ---------------------------------------------------------
    def baseline_seeds(self) -> tuple[int, ...]:
        return tuple(range(self.baseline))

    def repeat_seeds(self) -> tuple[int, ...]:
        """The first `repeat` calibration seeds, run twice once a night: a re-run that agrees
        no better than two seeds do shows that seeds cannot share much, so pairing stops
        paying for its runs (agent/decide/pairing.py)."""
        return self.baseline_seeds()[:self.repeat]

    def night(self, history: tuple[Decision, ...]) -> _Night:
        keeps = [i for i, d in enumerate(history) if d.verdict == Verdict.KEEP]
        selection = history[keeps[-1]].candidate_values if keeps else {}
        level = (fdr_module.lord_level(history, self.alpha, horizon=self.lord_horizon)
                 if self.fdr == "lord" else self.alpha)
        # The regime the night had measured when this candidate was proposed: its history is
        # fixed for its whole life, so its seed plan and its boundaries never change under it,
        # and they do not depend on its own runs (the error control needs that).
        # (the latest decision of this rule: an early stop's records no regime)
        measured = next((d.details["regime"] for d in reversed(history)
                         if isinstance(d.details, dict) and "regime" in d.details), None)
        planned = Regime.recorded(measured) if self.regimes else None
        return _Night(keeps=len(keeps), reign=len(history) - (keeps[-1] + 1 if keeps else 0),
                      selected_on=frozenset(selection), level=level,
                      regime=planned or Regime.UNKNOWN,
                      selection=tuple(sorted((int(s), float(v)) for s, v in selection.items())))

    def reuses_selection(self, night: _Night) -> bool:
        """In the paired regime the incumbent's selecting runs are its references: the seed's
        share of their luck is shared by the candidates run on those seeds and cancels in
        each pair; what does not cancel (the incumbent's own lucky commit×seed draw) makes the
        bar higher, never lower, so it can cost a keep but never buy one. The record's
        incumbent level still comes from fresh seeds only (`incumbent_fresh_mean`)."""
        return night.regime == Regime.PAIRED and bool(night.selection)

    def seed_plan(self, night: _Night) -> tuple[int, ...]:
        """The candidate seeds, in order, of the next candidate: in the paired regime the
        window starts on the seeds that selected the incumbent (it has run them: a candidate
        costs one run), else on a fresh block (the incumbent is run beside it)."""
        if self.reuses_selection(night):
            first = night.selection[0][0]
            room = SEED_BLOCK - self.max_seeds - first % SEED_BLOCK
            start = first + (night.reign // self.paired_refresh) % max(room, 1)
            return tuple(range(start, start + self.seeds_for(night)))
        start = SEED_BLOCK * (night.keeps + 1) + \
            (night.reign // self.refresh) % (SEED_BLOCK - self.max_seeds)
        return tuple(range(start, start + self.max_seeds))

    def incumbent_seeds(self, history: tuple[Decision, ...]) -> tuple[int, ...]:
        """No calibration stop after a keep in the paired regime: the new incumbent's
        selecting runs are its references (`reuses_selection`), and its fresh-seed values
        for the record accrue from the incumbent runs later candidates are paired with (and
        the baseline seeds the loop runs for the night's last incumbent). Elsewhere every
        baseline seed (the pooled seed-to-seed sd needs them where seeds share nothing)."""
        night = self.night(history)
        return () if self.reuses_selection(night) else self.baseline_seeds()

    def close_in_time(self, reference: dict[int, float], evidence: Evidence,
                      plan: tuple[int, ...]) -> dict[int, float]:
        """The incumbent runs a comparison rests on, outside the paired regime (there the
        pairs on the candidate's seeds carry nearly all the weight): agent/decide/drift.py."""
        if not self.regimes:
            return reference
        return drift.close_in_time(reference, evidence.reference_order, plan, self.recent)

    def seeds_for(self, night: _Night) -> int:
        """The most seeds a candidate may take: `paired_max` (4) in the paired regime, where two
        agreeing pairs tell most wins from nulls, so that its looks spend alpha on the first
        pairs (two pairs get 35% of it, against 13% in an eight-seed design); else `max_seeds`.
        Four made the most progress in the simulated nights at ρ 0.9 (3: 51% of the single
        run's, 4: 60%, 5 to 8: 60-61%) and as much as three in the real loop's."""
        return min(self.max_seeds, self.paired_max) if night.regime == Regime.PAIRED else self.max_seeds

    def looks(self) -> tuple[int, ...]:
        """The looks of a serial night: one per seed, from the screen to the maximum."""
        return tuple(range(self.screen, self.max_seeds + 1))

    def looks_taken(self, earlier: tuple[int, ...] | None, n: int) -> tuple[int, ...]:
        """The candidate seed counts of this candidate's looks, ending with the one at `n`.
        Without a record of them (a ledger of a serial night, before looks were recorded)
        the rule looked at every count from the screen on."""
        if earlier is None:
            return tuple(range(self.screen, n + 1))
        return (*sorted({m for m in earlier if m < n}), n)

    def futility_for(self, night: _Night) -> tuple[float, float]:
        """(screen, later) futility boundaries: in the paired regime one pair already tells
        most nulls from wins, so the screen asks more of a candidate before it buys a second
        seed (the one-seed rule's economy, with the error control kept: futility is binding
        and the efficacy boundaries are computed for it)."""
        return self.paired_futility if night.regime == Regime.PAIRED else self.futility

    def binding_futility(self, night: _Night) -> tuple[float, float]:
        """The futility the efficacy boundaries may count on (binding futility lowers them):
        `futility_for`, except after the screen in the unknown regime, where a candidate goes
        on while either of its two tests looks promising (`_own_pairs`): the boundaries then
        count on no futility after the screen, else the null paths the rule follows that the
        boundaries took as stopped would spend error nobody counted."""
        screen, later = self.futility_for(night)
        if self.regimes and night.regime == Regime.UNKNOWN:
            return screen, -math.inf
        return screen, later

    def boundaries(self, level: float, looks: tuple[int, ...] | None = None,
                   keep_from: int | None = None,
                   futility: tuple[float, float] | None = None,
                   max_seeds: int | None = None) -> tuple[float, ...]:
        """The efficacy boundaries of `looks` (default: a serial night's, every seed count);
        no keep before `keep_from` seeds (default `min_keep_seeds`), and the first look that
        may keep spends alpha·(keep_from/max_seeds)^spend_power (`max_seeds`: default the
        rule's)."""
        looks = looks or self.looks()
        keep_from = self.min_keep_seeds if keep_from is None else keep_from
        screen, later = futility or self.futility
        futility = tuple(screen if k == 0 else later for k in range(len(looks)))
        first = next((k for k, n in enumerate(looks) if n >= keep_from), len(looks))
        # Round the level down (never up) to a coarse grid so that LORD++'s ever-changing
        # levels reuse a few cached designs.
        decade = 10 ** math.floor(math.log10(level))
        rounded = decade * max(g for g in _LEVEL_GRID if g <= level / decade + 1e-9)
        return efficacy_boundaries(rounded, tuple(float(n) for n in looks), futility,
                                   first, self.spend_power, float(max_seeds or self.max_seeds))

    def seed_share(self, estimate: noise_module.NoiseEstimate) -> float:
        """The share of a run's luck credited to its seed (the conservative estimate; a
        subclass may know better, e.g. a benchmark told the true ρ)."""
        return estimate.seed_share

    # ---- the decision ----------------------------------------------------------------
    def next(self, evidence: Evidence) -> RunMore | Decision:
        night = self.night(evidence.history)
        plan = self.seed_plan(night)
        reference = {s: v for s, v in evidence.reference.items() if s not in night.selected_on}
        if night.regime != Regime.PAIRED:
            reference = self.close_in_time(reference, evidence, plan)
        if self.reuses_selection(night):
            reference = {**dict(night.selection), **reference}
        have = 0
        while have < len(plan) and plan[have] in evidence.candidate:
            have += 1
        candidate = {s: evidence.candidate[s] for s in plan[:have]}
        reference = {**reference, **{s: v for s in candidate
                                     if (v := drift.at_candidate_time(evidence, s)) is not None}}
        # The noise estimate of this look, computed once and only when needed: over the
        # candidate's planned seeds and the incumbent's fresh runs (never its selection runs).
        noise = functools.cache(lambda: noise_module.estimate(dataclasses.replace(
            evidence, candidate=candidate, reference=reference)))
        if have < self.screen:
            seeds = plan[:self.screen]
            return RunMore(candidate_seeds=tuple(s for s in seeds if s not in evidence.candidate),
                           reference_seeds=self._pair(seeds, reference, night, noise),
                           reason="screen")
        missing = self._pair(plan[:have], reference, night, noise,
                             beside=self._beside(evidence, night, plan[self.screen:have]))
        if missing:
            return RunMore(reference_seeds=missing, reason="paired reference")
        return self._look(evidence, night, candidate, reference, noise)

    def _pair(self, seeds: tuple[int, ...], reference: dict[int, float], night: _Night,
              noise: Callable[[], noise_module.NoiseEstimate],
              beside: tuple[int, ...] = ()) -> tuple[int, ...]:
        """Incumbent runs to add on these candidate seeds (paired), by the pairing policy;
        `beside`: seeds paired whatever the policy says (the blocked confirmation)."""
        missing = [s for s in seeds if s not in reference]
        if not missing:
            return ()
        if self._pays(reference, night, noise):
            return tuple(missing)
        return tuple(s for s in missing if s in beside)

    def _pays(self, reference: dict[int, float], night: _Night,
              noise: Callable[[], noise_module.NoiseEstimate]) -> bool:
        """The pairing policy: whether an incumbent run on a candidate seed pays for itself."""
        if len(reference) < self.pool or night.reign % self.refresh == 0:
            return True
        estimate = noise()
        if estimate.share_cap <= 0.1:
            return False   # a re-run of one seed shows seeds cannot share enough to pay for pairs
        # pairing helps, or the night cannot tell yet
        return estimate.pair_dof < 2 * noise_module.MIN_PAIR_DOF or self.seed_share(estimate) > 0.1

    def _look(self, evidence: Evidence, night: _Night, candidate: dict[int, float],
              reference: dict[int, float],
              noise: Callable[[], noise_module.NoiseEstimate]) -> RunMore | Decision:
        seeds = tuple(candidate)
        estimate = noise()
        conservative = self.seed_share(estimate)
        # In the paired regime the test is a paired t test on the night's pair spread with its
        # own degrees of freedom: credit the share at its point estimate (an 80% bound on top
        # of the t quantile would pay for the spread's uncertainty twice).
        share = max(conservative, estimate.point_share) if night.regime == Regime.PAIRED else conservative
        ref_level, cand_level, diff, sd_diff = gls_difference(candidate, reference, share)
        effect = -evidence.direction.sign * diff   # diff is ref − cand
        dof = min(estimate.dof, estimate.pair_dof) if share > 0 else estimate.dof
        looks = self.looks_taken(evidence.looks, len(seeds))
        k = len(looks) - 1
        most = self.seeds_for(night)
        bounds = self.boundaries(night.level, looks, self.min_keep_seeds,
                                 self.binding_futility(night), most)
        futility = self.futility_for(night)[0 if k == 0 else 1]
        pairs = [evidence.improvement(candidate[s], reference[s]) for s in seeds if s in reference]
        comparison = Comparison(paired_seeds=len(pairs),
                                paired_effect=sum(pairs) / len(pairs) if pairs else None,
                                incumbent_runs=len(reference), seed_share=share)
        details: dict[str, Any] = {
            "look": k + 1, "looks_at": list(looks), "level": night.level, "reign": night.keeps,
            "noise_sd": estimate.sd, "noise_dof": estimate.dof, "pair_sd": estimate.pair_sd,
            "pair_dof": estimate.pair_dof, "repeat_sd": estimate.repeat_sd,
            "repeat_dof": estimate.repeat_dof, "seed_share": share,
            "share_cap": estimate.share_cap, "incumbent_runs": len(reference),
            "incumbent_estimate": ref_level, "candidate_estimate": cand_level,
            "regime": measure_regime(estimate, conservative).value,
            "planned_regime": night.regime.value,
            "selection_runs_used": len(night.selection) if self.reuses_selection(night) else 0,
            "incumbent_fresh_mean": _fresh_mean(reference, night),
        }
        decide = functools.partial(self._decide, comparison=comparison)
        last = len(seeds) >= most
        if not estimate.sd or dof < 1:
            if not last:
                return self._more(evidence, night, reference, noise, "no noise estimate yet")
            why = ("no noise estimate: every commit measured on two or more seeds gave identical "
                   "values on all of them, so the seed changes nothing (see `nightshift check`)"
                   if estimate.sd == 0 else "no noise estimate: no commit was measured on two seeds")
            return decide(Verdict.INCONCLUSIVE, effect, None, None, candidate, reference,
                          why, details)
        se = estimate.sd * sd_diff
        t_stat = effect / se if se > 0 else math.copysign(math.inf, effect or 1.0)
        p_value = float(special.stdtr(dof, -t_stat))              # one-sided, nominal
        half = float(special.stdtrit(dof, 1 - self.alpha / 2)) * se
        keep_p = float(special.ndtr(-bounds[k]))                  # nominal level of look k
        stop_p = float(special.ndtr(-futility))
        details.update(nominal_keep_p=keep_p, nominal_stop_p=stop_p, t_stat=t_stat, dof=dof,
                       se=se)
        own = self._own_pairs(night, pairs, p_value, looks, most)
        details.update(own.details)
        p_value, futile = own.p_value, own.futile
        args = (effect, (effect - half, effect + half), p_value, candidate, reference)
        where = (f"look {k + 1} ({len(seeds)} of up to {most} seeds, "
                 f"{details['regime']} regime{own.words})")
        if p_value <= keep_p and own.agreed:
            if effect >= self.min_effect:
                bracket = self._bracket(evidence, night, candidate, reference,
                                        f"p={p_value:.2g} <= {keep_p:.2g} at {where}")
                if bracket:
                    return bracket
                return decide(Verdict.KEEP, *args, f"p={p_value:.2g} <= {keep_p:.2g} at "
                              f"{where}", details)
            return decide(Verdict.DISCARD, *args, f"significant at {where} but effect "
                          f"{effect:.4g} < min_effect {self.min_effect:g}", details)
        if futile >= stop_p:
            return decide(Verdict.DISCARD, *args, f"futility: p={futile:.2g} >= "
                          f"{stop_p:.2g} at {where}", details)
        if last:
            return decide(Verdict.INCONCLUSIVE, *args, f"p={p_value:.2g} at {where}: "
                          f"not below {keep_p:.2g}", details)
        # A promising look whose pairs rest on incumbent runs made before the candidate's is
        # bracketed before any more seeds: on a drifting machine that one run ends the
        # candidate (the drift was the effect), and a real win needs it for its keep anyway.
        promising = f"promising: p={p_value:.2g} at {where}"
        return self._bracket(evidence, night, candidate, reference, promising) \
            or self._more(evidence, night, reference, noise, promising, look=len(seeds))

    def _own_pairs(self, night: _Night, pairs: list[float], p_value: float,
                   looks: tuple[int, ...], most: int) -> _OwnPairs:
        """What the candidate's own same-seed differences add to the night's test (p_value):
        a paired t test on their own spread (`own_pairs_p`, n - 1 degrees of freedom), valid
        whatever the candidate shares with a seed.

        - Unknown regime (the start of every night): the night's test credits the pairs
          nothing, so a win the seed's luck would hide takes five pairs or more. The own test
          is a second way to keep: each test gets half the look's level (Bonferroni: the
          reported p is twice the smaller) and futility needs both to look futile.
        - Paired regime: the night's pair spread makes a pair decisive, but only for a
          candidate that shares each seed's luck as the night's commits did. An edit that
          draws its random numbers in another order (a new layer's weights, another data
          order) redraws that luck, and on the night's spread alone 23% of such nulls were
          kept (docs/decisions.md, "A null that redraws the seed's luck"). So the own test
          must pass too, at this look's share of alpha (Bonferroni over the looks): each test
          holds alpha where its assumption does, and one pair cannot keep. Futility when
          either looks futile.
        """
        if not self.regimes or night.regime not in (Regime.UNKNOWN, Regime.PAIRED):
            return _OwnPairs(p_value, p_value)
        own = own_pairs_p(pairs)
        if night.regime == Regime.UNKNOWN:
            if own is None:
                return _OwnPairs(p_value, p_value)
            futile = min(p_value, own[0])
            return _OwnPairs(min(1.0, 2.0 * futile), futile, words=(
                f"; or the {len(pairs)} pairs' own t test, Bonferroni"), details=dict(
                unpaired_p=p_value, own_pairs_p=own[0], own_pairs_dof=own[1]))
        if own is None:
            return _OwnPairs(p_value, p_value, agreed=False)
        k = len(looks) - 1
        before = looks[k - 1] if k and looks[k - 1] >= self.min_keep_seeds else 0
        level = spent_by(night.level, looks[k], most, self.spend_power) - \
            spent_by(night.level, before, most, self.spend_power)
        return _OwnPairs(p_value, max(p_value, own[0]), agreed=own[0] <= level, words=(
            f"; the {len(pairs)} pairs' own t test p={own[0]:.2g}, level {level:.2g}"), details=dict(
            own_pairs_p=own[0], own_pairs_dof=own[1], own_pairs_level=level))

    def _more(self, evidence: Evidence, night: _Night, reference: dict[int, float],
              noise: Callable[[], noise_module.NoiseEstimate], reason: str,
              look: int | None = None) -> RunMore:
        """The next planned candidate seeds (a batch of up to `evidence.batch`), with the
        incumbent on them where the policy pairs it."""
        plan = self.seed_plan(night)
        seeds = tuple(s for s in plan if s not in evidence.candidate)[:max(1, evidence.batch)]
        # Alternate the order of the blocked pairs (incumbent first on even places of the
        # plan, the candidate first on odd ones: ABBA): a drift of the machine's speed then
        # cancels between consecutive pairs instead of favouring whichever ran later. The
        # partner of a candidate-first seed is asked for once it landed (`next`).
        before = tuple(s for s in seeds if not (self._beside(evidence, night, (s,))
                                                and plan.index(s) % 2))
        return RunMore(candidate_seeds=seeds,
                       reference_seeds=self._pair(before, reference, night, noise,
                                                  beside=self._beside(evidence, night, before)),
                       reason=reason, look=look)

    def _beside(self, evidence: Evidence, night: _Night, seeds: tuple[int, ...]) -> tuple[int, ...]:
        """A blocked design for the seeds that confirm a promising candidate where a seed
        does not fix the run: the incumbent runs beside each of them, so that what the
        keep rests on was measured at the same time as the candidate (drift cancels instead
        of posing as an effect). Only once the night records run order (a ledger that has
        it), and never in the paired regime (there the pairs already are the design)."""
        if not (self.regimes and self.blocked) or night.regime == Regime.PAIRED \
                or not evidence.reference_order:
            return ()
        return seeds

    def _bracket(self, evidence: Evidence, night: _Night, candidate: dict[int, float],
                 reference: dict[int, float], look: str) -> RunMore | None:
        """The incumbent again on the seeds `_unbracketed` names, after the candidate's runs,
        before the look (`look`: what it saw) is acted on; None when there are none."""
        seeds = self._unbracketed(evidence, night, candidate, reference)
        if not seeds:
            return None
        return RunMore(again_seeds=seeds, reason=(
            f"{look}, on incumbent runs made before the candidate's: the incumbent runs "
            f"seed(s) {', '.join(map(str, seeds))} again, after it (drift)"))

    def _unbracketed(self, evidence: Evidence, night: _Night, candidate: dict[int, float],
                     reference: dict[int, float]) -> tuple[int, ...]:
        """The candidate's paired seeds a keep waits on, in the paired regime: those whose
        incumbent runs all came before the candidate's (`drift.made_before`). Elsewhere the
        pairs are made beside each other in alternating order (`_more`)."""
        if not self.blocked or night.regime != Regime.PAIRED:
            return ()
        return drift.made_before(evidence, candidate, reference)

    def _decide(self, verdict: Verdict, effect: float, interval: tuple[float, float] | None,
                p_value: float | None, candidate: dict[int, float],
                reference: dict[int, float], reason: str, details: dict[str, Any],
                comparison: Comparison | None = None) -> Decision:
        return Decision(verdict=verdict, effect=effect, interval=interval, p_value=p_value,
                        seeds=tuple(candidate), candidate_values=dict(candidate),
                        reference_values=dict(reference), rule=self.name, reason=reason,
                        details=details, comparison=comparison)


def _fresh_mean(reference: dict[int, float], night: _Night) -> float | None:
    """The incumbent's mean over fresh seeds only (never the runs that selected it)."""
    selected = dict(night.selection)
    fresh = [v for s, v in reference.items() if s not in selected]
    return sum(fresh) / len(fresh) if fresh else None
