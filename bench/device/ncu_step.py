#!/usr/bin/env python3
"""Per-kernel time of one decode step from an Nsight Compute run, every kernel timed alone.

Input: the CSV (optionally .xz) of
  ncu --clock-control none --metrics gpu__time_duration.sum --csv \
      ferry bench -m MODEL --device cuda -p 8 -n 3 > step.csv
Usage: bench/device/ncu_step.py step.csv[.xz]
The step is the kernels after the second-to-last launch of the run's last kernel (the output head's matvec,
which ends every step) up to its last launch. Prints each kernel family's count, total and mean time, and
the whole step's sum (kernels timed alone, one at a time: no PDL overlap, no hand-offs)."""
import csv, io, lzma, re, sys, collections

path = sys.argv[1]
raw = lzma.open(path, "rt").read() if path.endswith(".xz") else open(path).read()
lines = [l for l in raw.splitlines() if l.startswith('"')]
rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
ks = []
for r in rows:
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    v = float(r["Metric Value"].replace(",", ""))
    unit = r.get("Metric Unit", "nsecond")
    us = v / 1000 if unit.startswith("n") else v / 1e6 if unit.startswith("m") and unit != "msecond" else v
    if unit == "msecond":
        us = v * 1000
    if unit == "usecond":
        us = v
    ks.append((r["Kernel Name"] + " " + r.get("Grid Size", ""), us))
ends = [i for i, (n, _) in enumerate(ks) if n == ks[-1][0]]
if len(ends) < 2:
    sys.exit("the last kernel ran once in %d kernels" % len(ks))
step = ks[ends[-2] + 1: ends[-1] + 1]
fam = collections.OrderedDict()
for n, us in step:
    short = re.sub(r"\(.*", "", n).replace("void ", "").replace("unnamed>::", "")
    short = re.sub(r"<.*", "", short).split("::")[-1]
    tmpl = re.search(r"<(.*)>", n)
    key = short + ("<" + tmpl.group(1)[:60] + ">" if tmpl else "")
    c, t = fam.get(key, (0, 0.0))
    fam[key] = (c + 1, t + us)
total = sum(us for _, us in step)
print("kernels in the step: %d, sum of their times alone: %.1f us" % (len(step), total))
for k, (c, t) in sorted(fam.items(), key=lambda kv: -kv[1][1]):
    print("%8.1f us %5.1f %%  %4d x %7.2f us  %s" % (t, 100 * t / total, c, t / c, k[:150]))
