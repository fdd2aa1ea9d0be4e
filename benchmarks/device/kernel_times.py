"""Per-kernel GPU time of one decode step from ncu CSV files (profile_decode.py under
`ncu --csv --metrics gpu__time_duration.sum`), side by side per file, largest first.

    python3 kernel_times.py N_STEPS f16.csv q4_0.csv
"""
import csv
import re
import sys
from collections import defaultdict


def kernel_times(path: str, n_steps: int) -> dict[str, float]:
    """Microseconds per decode step, summed by kernel name (template arguments dropped)."""
    with open(path) as f:
        lines = f.read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    times: dict[str, float] = defaultdict(float)
    for row in csv.DictReader(lines[start:]):
        if row["Metric Name"] != "gpu__time_duration.sum":
            continue
        name = re.sub(r"<.*", "", row["Kernel Name"]).strip()
        value = float(row["Metric Value"].replace(",", ""))
        scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}[row["Metric Unit"]]
        times[name] += value * scale / n_steps
    return times


def main() -> None:
    n_steps, paths = int(sys.argv[1]), sys.argv[2:]
    tables = [kernel_times(p, n_steps) for p in paths]
    names = sorted(set().union(*tables), key=lambda n: -max(t.get(n, 0.0) for t in tables))
    print("| kernel | " + " | ".join(f"{p} (µs/token)" for p in paths) + " |")
    print("|---|" + "---:|" * len(paths))
    for name in names:
        print(f"| `{name[:70]}` | " + " | ".join(f"{t.get(name, 0.0):.1f}" for t in tables) + " |")
    print("| **total** | " + " | ".join(f"**{sum(t.values()):.1f}**" for t in tables) + " |")


if __name__ == "__main__":
    main()
