"""Compare the metrics.jsonl of two trees of run directories, value by value.

    python scripts/compare_metrics.py RUNS_BEFORE RUNS_AFTER [NEW_KEY ...]

For a change meant to keep behaviour: run the same configs and seeds with both versions of the code
on one machine, then compare. Wall-time (time/*) and memory (system/*) readings are skipped; keys
named after the two trees are metrics the newer code adds, reported and not compared. The runs'
summary.json (success before and after, delivered models, start weights hash) must match too.
Exit status 0 when everything matches.
"""

import json
import sys
from pathlib import Path


def load(path: Path, new: set) -> list[dict]:
    skip = ("time/", "system/")
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return [{k: v for k, v in r.items() if not k.startswith(skip) and k not in new} for r in rows]


def main(argv: list[str]) -> int:
    a, b, new = Path(argv[0]), Path(argv[1]), set(argv[2:])
    ok = True
    for run in sorted(d.name for d in a.iterdir() if (d / "metrics.jsonl").exists()):
        la, lb = load(a / run / "metrics.jsonl", new), load(b / run / "metrics.jsonl", new)
        same = la == lb
        n = sum(len(x) for x in la)
        print(f"{run}: {len(la)} vs {len(lb)} lines, {n} values compared: {'identical' if same else 'DIFFERENT'}")
        if not same:
            diffs = [
                (i, x.get("tag"), k, x.get(k), y.get(k))
                for i, (x, y) in enumerate(zip(la, lb))
                for k in sorted(set(x) | set(y))
                if x.get(k) != y.get(k)
            ]
            for d in diffs[:10]:
                print("   line %d (%s) %s: %r vs %r" % d)
        sa, sb = (json.loads((d / run / "summary.json").read_text()) for d in (a, b))
        for k in ("success_before", "success_final", "models", "selection", "start_model_sha256"):
            if sa.get(k) != sb.get(k):
                print(f"   summary.json {k}: {sa.get(k)!r} vs {sb.get(k)!r}")
                same = False
        ok &= same
    print("all identical" if ok else "differences found")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
