"""Summarise `ncu -i X --page source --csv --print-source sass` output: by opcode and by stretch of SASS."""
import csv, sys, collections, gzip
path = sys.argv[1]
op = gzip.open if path.endswith(".gz") else open
rows = list(csv.reader(op(path, "rt")))
hdr_i = next(i for i, r in enumerate(rows) if "Source" in r and any("Executed" in c for c in r))
hdr = rows[hdr_i]
def col(name):
    return next(i for i, c in enumerate(hdr) if c == name)
src = col("Source")
ex = next(i for i, c in enumerate(hdr) if c.startswith("Warp Instructions Executed") or c == "Instructions Executed")
samp = next(i for i, c in enumerate(hdr) if c.startswith("Warp Stall Sampling (All") )
data = []
for r in rows[hdr_i + 1:]:
    if len(r) <= max(src, ex, samp): continue
    try:
        data.append((r[src].strip(), float(r[ex] or 0), float(r[samp] or 0)))
    except ValueError:
        pass
stalls = [i for i, c in enumerate(hdr) if c.startswith("stall_") and "Not Issued" not in c]
st = collections.Counter()
for r in rows[hdr_i + 1:]:
    for i in stalls:
        try: st[hdr[i]] += float(r[i] or 0)
        except (ValueError, IndexError): pass
tot_e = sum(d[1] for d in data); tot_s = sum(d[2] for d in data)
print(f"{len(data)} SASS instructions, {tot_e:.0f} warp instructions executed (all CTAs), {tot_s:.0f} samples")
by = collections.defaultdict(lambda: [0, 0])
for s, e, m in data:
    o = s.split()[0] if s else "?"
    if o.startswith("@"): o = s.split()[1]
    o = o.split(".")[0]
    by[o][0] += e; by[o][1] += m
print("| opcode | share of executions | share of samples |\n| --- | ---: | ---: |")
for o, (e, m) in sorted(by.items(), key=lambda kv: -kv[1][0])[:16]:
    print(f"| {o} | {100*e/tot_e:.1f}% | {100*m/tot_s:.1f}% |")
print("\n| stall | share |\n| --- | ---: |")
for k, v in st.most_common(8): print(f"| {k} | {100*v/max(sum(st.values()),1):.1f}% |")
W = int(sys.argv[2]) if len(sys.argv) > 2 else 150
print(f"\n| stretch | samples | executions | LDG | LDS | BAR | MUFU | first opcodes |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
for a in range(0, len(data), W):
    ch = data[a:a + W]
    cnt = lambda p: sum(1 for s, _, _ in ch if p in s.split(" ")[0] or (s.startswith("@") and p in s.split(" ")[1]))
    print(f"| {a}–{a+len(ch)} | {100*sum(c[2] for c in ch)/tot_s:.1f}% | {100*sum(c[1] for c in ch)/tot_e:.1f}% | "
          f"{cnt('LDG')} | {cnt('LDS')} | {cnt('BAR')} | {cnt('MUFU')} | |")
