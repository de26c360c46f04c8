"""Does the replay of the current settings reproduce what the deployment showed?

One rule for every "verified" label (the advice, `whatif`, the report): a prediction is only
as good as the replay of now. Each figure the deployment showed must be matched within its
tolerance (tok/s 10 %, e2e p99 15 %, preemptions max(2, 20 %), and the e2e p99 of each
priority class the client rows show 20 %); a figure it did not show is not checked, and at
least one rate or latency figure must be there to check. Pure: two summaries in, a verdict out.
"""

from __future__ import annotations

from dataclasses import dataclass

from preemptscope.analysis.sim.observed import ObservedFigures
from preemptscope.analysis.sim.whatif import WhatIfOutcome

TOL_THROUGHPUT = 0.10  # output tok/s, relative
TOL_E2E_P99 = 0.15  # e2e p99, relative
TOL_PREEMPTIONS = 0.20  # relative, but never tighter than ...
TOL_PREEMPTIONS_ABS = 2  # ... this many preemptions
TOL_CLASS_E2E_P99 = 0.20  # e2e p99 of each priority class, relative
CLASS_PREFIX = "e2e_p99:priority="  # a class check's name: CLASS_PREFIX + the priority


@dataclass(frozen=True)
class FigureCheck:
    """One figure: what the replay of now gave, what was observed, and whether they agree."""

    name: str
    replayed: float
    observed: float
    within: bool
    tolerance: float = 0.0  # relative (absolute preemptions for "preemptions")

    @property
    def off_by(self) -> float | None:
        """Relative error of the replay (None where nothing was observed to compare with)."""
        return self.replayed / self.observed - 1 if self.observed else None

    def describe(self) -> str:
        if self.name == "preemptions":
            return f"{self.replayed:,.0f} preemptions vs {self.observed:,.0f} observed"
        if self.name.startswith(CLASS_PREFIX):
            cls = self.name.removeprefix(CLASS_PREFIX)
            return (
                f"{self.replayed:,.2f} s e2e p99 of priority {cls} vs {self.observed:,.2f} observed"
            )
        unit = "tok/s" if self.name == "output_throughput" else "s e2e p99"
        fmt = ",.0f" if self.name == "output_throughput" else ",.2f"
        return f"{self.replayed:{fmt}} {unit} vs {self.observed:{fmt}} observed"


@dataclass(frozen=True)
class Fidelity:
    """The checks of every observed figure; `verified` only when all hold."""

    checks: tuple[FigureCheck, ...]

    @property
    def verified(self) -> bool:
        rates = [c for c in self.checks if c.name != "preemptions"]
        return bool(rates) and all(c.within for c in self.checks)

    def score(self) -> float:
        """Sum of (error / tolerance)^2 over the checks: below len(checks) is not enough
        (verified needs every term <= 1), but it is what a fit can minimise."""
        total = 0.0
        for c in self.checks:
            if c.name == "preemptions":
                err = abs(c.replayed - c.observed)
            else:
                err = abs(c.replayed / c.observed - 1) if c.observed else 0.0
            total += (err / c.tolerance) ** 2 if c.tolerance else 0.0
        return total

    @property
    def misses(self) -> tuple[FigureCheck, ...]:
        return tuple(c for c in self.checks if not c.within)

    def finding(self) -> str:
        """What the check found, without the label: 'the replay of now matches ...' / 'is off
        by ...' with the figures."""
        if not any(c.name != "preemptions" for c in self.checks):
            return "no observed throughput or e2e p99 to check the replay of now against"
        if self.verified:
            return "the replay of now matches " + "; ".join(c.describe() for c in self.checks)
        return "the replay of now is off by " + "; ".join(c.describe() for c in self.misses)

    def describe(self) -> str:
        """'verified: ...' or 'unverified: the replay of now is off by ...', with the figures."""
        return f"{'verified' if self.verified else 'unverified'}: {self.finding()}"

    def to_dict(self) -> dict[str, object]:
        return {
            "verified": self.verified,
            "checks": {
                c.name: {"replayed": c.replayed, "observed": c.observed, "within": c.within}
                for c in self.checks
            },
            "summary": self.describe(),
        }


def preemption_tolerance(count: int) -> float:
    """How far a replayed preemption count may be from `count` and still match it."""
    return max(TOL_PREEMPTIONS_ABS, TOL_PREEMPTIONS * count)


def _relative(replayed: float, observed: float, tol: float) -> bool:
    return observed > 0 and abs(replayed / observed - 1) <= tol


def fidelity(observed: ObservedFigures, now: WhatIfOutcome) -> Fidelity:
    """Compare the replay of now with every figure the deployment showed."""
    checks: list[FigureCheck] = []
    if observed.output_throughput is not None:
        checks.append(
            FigureCheck(
                "output_throughput",
                now.output_throughput,
                observed.output_throughput,
                _relative(now.output_throughput, observed.output_throughput, TOL_THROUGHPUT),
                TOL_THROUGHPUT,
            )
        )
    if observed.e2e_p99 is not None and now.e2e_p99 is not None:
        checks.append(
            FigureCheck(
                "e2e_p99",
                now.e2e_p99,
                observed.e2e_p99,
                _relative(now.e2e_p99, observed.e2e_p99, TOL_E2E_P99),
                TOL_E2E_P99,
            )
        )
    if observed.preemptions is not None:
        tol = preemption_tolerance(observed.preemptions)
        checks.append(
            FigureCheck(
                "preemptions",
                float(now.preemptions),
                float(observed.preemptions),
                abs(now.preemptions - observed.preemptions) <= tol,
                tol,
            )
        )
    for cls, seen in observed.per_priority.items():
        want = seen.get("e2e_p99")
        got = now.per_priority.get(cls, {}).get("e2e_p99")
        if want is not None and got is not None:
            checks.append(
                FigureCheck(
                    CLASS_PREFIX + cls,
                    float(got),
                    float(want),
                    _relative(float(got), float(want), TOL_CLASS_E2E_P99),
                    TOL_CLASS_E2E_P99,
                )
            )
    return Fidelity(tuple(checks))
