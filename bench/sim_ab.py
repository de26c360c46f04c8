"""A/B check of the simulator: full outputs of this tree's engine against another commit's.

Run: python bench/sim_ab.py [--against REV]   (default HEAD~1; exit 1 on any difference)
     python bench/sim_ab.py --against REV --write-golden   (tests/fixtures/sim_golden.json)

Every array of every SimResult (each request's first schedule, first token and finish time,
its preemptions, every preemption and resume, every step's stats, every token time) is
compared bit for bit on the workloads of tests/sim/abcases.py. The reference engine is loaded
from git (engine.py, steps.py and config.py at REV) beside this tree's, so both run in one
process on the same inputs. tests/sim/test_golden.py checks the same fingerprints without git.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from preemptscope.analysis.sim.engine import simulate  # noqa: E402

from tests.sim.abcases import GOLDEN, cases, differences, fingerprint, run_case  # noqa: E402

SIM = "preemptscope.analysis.sim"


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True
    ).stdout


def load_reference(rev: str) -> Any:
    """`simulate` as of commit `rev` (its config, steps and engine modules), beside this one."""
    return load_modules(rev)["engine"].simulate


def load_modules(rev: str) -> dict[str, types.ModuleType]:
    """The simulator's config, steps, batch and engine modules and analysis/advice.py (with the
    sizing it imports, analysis/sizing.py) at `rev`."""
    tag = git("rev-parse", "--short", rev).strip()
    loaded: dict[str, str] = {}
    for name in ("config", "steps", "batch", "engine", "sizing", "advice"):
        outside_sim = name in ("sizing", "advice")
        path = f"analysis/{name}.py" if outside_sim else f"analysis/sim/{name}.py"
        try:
            source = git("show", f"{rev}:{path}")
        except subprocess.CalledProcessError:
            continue  # not in that commit (batch.py came with the speed work, sizing.py later)
        for other, module_name in loaded.items():  # the reference's own modules, not ours
            package = "preemptscope.analysis" if other == "sizing" else SIM
            source = source.replace(f"{package}.{other} import", f"{module_name} import")
        module_name = f"_sim_{tag}_{name}"
        module = types.ModuleType(module_name)
        sys.modules[module_name] = module  # dataclasses look their module up while exec runs
        exec(compile(source, f"{tag}:{path}", "exec"), module.__dict__)
        loaded[name] = module_name
    return {name: sys.modules[module_name] for name, module_name in loaded.items()}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--against", default="HEAD~1", help="git revision of the reference")
    parser.add_argument("--write-golden", action="store_true", help=f"write {GOLDEN.name}")
    args = parser.parse_args()
    ref = load_reference(args.against)
    if args.write_golden:
        golden = {c[0]: fingerprint(run_case(ref, c)) for c in cases(quick=True)}
        commit = git("rev-parse", "--short", args.against).strip()
        GOLDEN.write_text(json.dumps({"reference": commit, "cases": golden}, indent=1) + "\n")
        print(f"wrote {GOLDEN} ({len(golden)} cases, reference {commit})")
        return 0
    failed = 0
    all_cases = cases()
    for case in all_cases:
        want, got = fingerprint(run_case(ref, case)), fingerprint(run_case(simulate, case))
        diff = differences(want, got)
        failed += bool(diff)
        status = "identical" if not diff else "DIFFERS: " + ", ".join(diff)
        counts = f"steps {got['steps']:>7,}  preemptions {got['preemptions']:>5,}"
        print(f"{case[0]:30s} {counts}  {status}")
    print(f"{len(all_cases) - failed} of {len(all_cases)} identical to {args.against}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
