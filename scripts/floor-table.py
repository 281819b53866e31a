#!/usr/bin/env python3
"""Before/after tables from two runs of the floor benchmark.

    cargo bench -p threadbox-runc --bench floor > before.txt   # at the older commit
    cargo bench -p threadbox-runc --bench floor > after.txt    # at the newer one
    python3 scripts/floor-table.py before.txt after.txt [before2.txt after2.txt ...]

Prints, as markdown, the figures (threadbox and bare runc medians, the ratio) of the first two
runs side by side, then per path each part's median per call (the spans the benchmark's tracing
layer timed) before and after; given more pairs, a last table of every pair's ratios and the
host's load at each run's start, to show how much they move between sittings. Nothing is
computed here: every number comes from the reports.
"""

import re
import sys


def parse(path):
    figures, paths, current = {}, {}, None
    load = "?"
    with open(path, encoding="utf-8") as report:
        for line in report:
            line = line.rstrip("\n")
            started = re.match(r"load average \(1, 5, 15 min\) at the start: ([\d.]+)", line)
            if started:
                load = started.group(1)
            heading = re.match(r"where the time goes: (.+) \((\d+) calls", line)
            if heading:
                current = heading.group(1)
                paths[current] = {}
                continue
            cells = [c.strip() for c in line.strip("|").split("|")] if line.startswith("|") else []
            if not cells or cells[0] in ("figure", "part", "refill") or set(cells[0]) <= {"-"}:
                if not line:
                    current = None
                continue
            if current is not None and len(cells) == 3:
                paths[current][cells[0]] = (float(cells[1]), float(cells[2]))
            elif len(cells) == 6:
                ours = float(cells[1].split()[0])
                bare = float(cells[2].split()[0])
                figures[cells[0]] = (ours, bare, float(cells[3]), cells[4])
    return figures, paths, load


def main():
    if len(sys.argv) < 3 or len(sys.argv) % 2 == 0:
        sys.exit(__doc__)
    runs = [parse(path) for path in sys.argv[1:]]
    (before_figures, before_paths, _), (after_figures, after_paths, _) = runs[:2]
    print("| figure | before: threadbox / bare runc ms | ratio | after: threadbox / bare runc ms | ratio | goal |")
    print("|---|---|---|---|---|---|")
    for name, (ours, bare, ratio, goal) in after_figures.items():
        old = before_figures.get(name)
        old_cells = f"{old[0]:.1f} / {old[1]:.1f} | {old[2]:.2f}" if old else "– | –"
        print(f"| {name} | {old_cells} | {ours:.1f} / {bare:.1f} | {ratio:.2f} | {goal} |")
    for path, parts in after_paths.items():
        old_parts = before_paths.get(path, {})
        print()
        print(f"**{path}**: median ms per call (spans per call)")
        print()
        print("| part | before | after |")
        print("|---|---|---|")
        for part in sorted(set(parts) | set(old_parts)):
            cells = []
            for table in (old_parts, parts):
                if part in table:
                    spans, ms = table[part]
                    cells.append(f"{ms:.2f} ({spans:g})")
                else:
                    cells.append("–")
            print(f"| {part} | {cells[0]} | {cells[1]} |")
    if len(runs) > 2:
        spread(runs, list(after_figures))


def spread(runs, names):
    """Every pair's ratios, before → after, with the load (1 min) between its two runs."""
    print()
    print("| sitting | load between the two runs | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for n in range(0, len(runs), 2):
        # The after run's start is the before run's end; older reports do not print their load.
        (before, _, _), (after, _, after_load) = runs[n], runs[n + 1]
        cells = []
        for name in names:
            old = f"{before[name][2]:.2f}" if name in before else "–"
            new = f"{after[name][2]:.2f}" if name in after else "–"
            cells.append(f"{old} → {new}")
        print(f"| {n // 2 + 1} | {after_load} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
