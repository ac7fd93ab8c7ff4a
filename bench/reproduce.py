"""Compare a paper-findings run with a committed one: does it reproduce within the stated spread?

The stated spread (docs/benchmarks/paper-findings.md) is per field, in absolute units: scores on
the test split (accuracy, F1, source/direct, agreement, negative flips, similarity and its chance
level) within ±0.05 — six test examples of the cpu profile's 120; retention within ±0.06; barriers
within ±0.05; steps to a target within ±2 evaluation intervals; and the number of cells in which
each of the paper's claims held within ±1. The relative weight change of each hop within ±0.01.

    python -m bench.reproduce NEW_RESULTS.json REFERENCE_RESULTS.json [--out check.json]

Exit status 0 when every compared value is within its spread, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

SCORE_FIELDS = ("test", "test_f1", "source", "direct", "agreement", "negative_flip_rate", "similarity", "chance")
SPREAD = {
    **dict.fromkeys(SCORE_FIELDS, 0.05),
    "retention": 0.06,
    "loss_barrier": 0.05,
    "accuracy_barrier": 0.05,
    "relative_l2": 0.01,
}
STEP_FIELDS = ("steps99", "steps100")


def compare(new: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    eval_every = reference["meta"]["profile_settings"]["train"]["eval_every"]
    spreads = {**SPREAD, **dict.fromkeys(STEP_FIELDS, 2 * eval_every)}
    rows: list[dict[str, Any]] = []
    missing: list[str] = []
    for key, fields in reference["aggregates"].items():
        mine = new["aggregates"].get(key)
        if mine is None:
            missing.append(key)
            continue
        for name, spread in spreads.items():
            if name not in fields or name not in mine:
                continue
            expected, measured = fields[name].get("mean"), mine[name].get("mean")
            if expected is None or measured is None:
                continue
            rows.append({
                "cell": key, "field": name, "reference": expected, "measured": measured,
                "difference": measured - expected, "spread": spread, "within": abs(measured - expected) <= spread,
            })  # fmt: skip
    claims = []
    for name, claim in reference["claims"].items():
        measured = new["claims"].get(name, {}).get("held_in")
        claims.append({
            "claim": name, "reference": f"{claim['held_in']}/{claim['of']}",
            "measured": f"{measured}/{new['claims'].get(name, {}).get('of')}",
            "within": measured is not None and abs(measured - claim["held_in"]) <= 1,
        })  # fmt: skip
    outside = [row for row in rows if not row["within"]]
    return {
        "compared_values": len(rows),
        "outside_spread": outside,
        "missing_cells": missing,
        "claims": claims,
        "max_score_difference": max((abs(r["difference"]) for r in rows if r["field"] in SCORE_FIELDS), default=0.0),
        "reproduced": not outside and not missing and all(c["within"] for c in claims),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("new", type=Path)
    parser.add_argument("reference", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    result = compare(json.loads(args.new.read_text()), json.loads(args.reference.read_text()))
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text)
    print(f"{result['compared_values']} values compared; {len(result['outside_spread'])} outside the spread; "
          f"{len(result['missing_cells'])} cells missing; largest score difference {result['max_score_difference']:.3f}")
    for claim in result["claims"]:
        print(f"  {claim['claim']}: held in {claim['measured']} (reference {claim['reference']})")
    for row in result["outside_spread"]:
        print(f"  outside: {row['cell']} {row['field']}: {row['measured']:.3f} vs {row['reference']:.3f}")
    print("reproduced" if result["reproduced"] else "NOT reproduced")
    return 0 if result["reproduced"] else 1


if __name__ == "__main__":
    sys.exit(main())
