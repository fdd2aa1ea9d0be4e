"""ncu's details CSV of ncu_depths.py or ncu_batched.py runs -> one table: per mode and captured step (a depth,
or a number N of sequences decoding together), each attention kernel's time per step (summed over layers), DRAM
bytes read per step and the rate, achieved and theoretical occupancy, waves, registers, the warp instructions it
executed per step and how busy the schedulers' issue slots were (where the CSV has those metrics), and the largest
warp stalls; then a row of the step's attention kernels together.

    python3 ncu_summary.py N_LAYER [LABEL=]STEPS MODE=FILE.csv [MODE=FILE.csv ...]
        STEPS: 0,2048,8192,32768 (depths, ncu_depths.py) or N=1,8,32 (ncu_batched.py's N at one depth)
"""
import csv
import re
import sys
from collections import defaultdict

# a layer's attention kernel (FA over f16 with several KV streams: the MMA kernel); the reduce/combine/fixup follow
# it, PRE comes before it (with several streams)
MAIN = ("k_pyl_attn_decode", "flash_attn_ext_vec", "flash_attn_ext_f16")
PRE = ("flash_attn_mask_to_KV_max",)
METRICS = {
    "Duration": "time",
    "DRAM Throughput": "dram_pct",
    "Memory Throughput": "mem_pct",
    "Achieved Occupancy": "occupancy",
    "Theoretical Occupancy": "theoretical",
    "Waves Per SM": "waves",
    "Registers Per Thread": "registers",
    "Block Limit Registers": "limit_regs",
    "Block Limit Shared Mem": "limit_smem",
    "Warp Cycles Per Issued Instruction": "cpi",
    # the kernel's whole instruction stream (summed over a step's launches below), which bounds its time at the
    # schedulers' issue rate whatever the memory does, and how busy their issue slots were
    "smsp__inst_executed.sum": "inst",
    "smsp__issue_active.avg.pct_of_peak_sustained_active": "issue_pct",
}
STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio")
UNIT = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
INST = {"Kinst": 1e3, "Minst": 1e6, "Ginst": 1e9}  # instruction counts as ncu may scale them ("inst" unscaled)
BYTES = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def rows(path):
    with open(path) as f:
        lines = f.read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    return list(csv.DictReader(lines[start:]))


def summarize(path, n_layer, steps):
    kernels = {}  # ID -> (name, {metric: value})
    stalls = defaultdict(lambda: defaultdict(float))
    for r in rows(path):
        kid = int(r["ID"])
        name = re.sub(r"<.*", "", r["Kernel Name"]).replace("void ", "").strip()
        k = kernels.setdefault(kid, (name, {}))
        metric, unit, value = r["Metric Name"], r["Metric Unit"], r["Metric Value"].replace(",", "")
        try:
            v = float(value)
        except ValueError:
            continue
        if metric in METRICS:
            k[1][METRICS[metric]] = v * UNIT.get(unit, 1.0) if metric == "Duration" else v * INST.get(unit, 1.0)
        k[1]["grid"] = r.get("Grid Size", "")
        per = BYTES.get(unit.split("/")[0], 1.0)  # e.g. "Kbyte/block"
        if metric == "dram__bytes_read.sum":
            k[1]["dram_read"] = v * per
        if metric == "Dynamic Shared Memory Per Block":
            k[1]["smem_dyn"] = v * per
        stall = STALL.fullmatch(metric)
        if stall:
            stalls[kid][stall.group(1)] = v
        if metric == "Duration" and unit not in UNIT:
            raise SystemExit(f"unknown duration unit {unit}")
    out = defaultdict(lambda: defaultdict(list))  # step -> kernel name -> [metrics]
    n_main = 0
    for kid in sorted(kernels):
        name, m = kernels[kid]
        n_main += name in MAIN
        step = n_main if name in PRE else max(n_main, 1) - 1  # the index of the layer's main kernel
        out[steps[min(step // n_layer, len(steps) - 1)]][name].append((m, stalls.get(kid, {})))
    return out


def main():
    n_layer = int(sys.argv[1])
    label, _, values = sys.argv[2].rpartition("=")
    steps = [int(v) for v in values.split(",")]
    print(f"| mode | {label or 'depth'} | kernel | launches | µs/step | µs/launch | DRAM MB read/step | read GB/s | "
          "DRAM % peak | achieved occupancy % | theoretical % | waves/SM | regs | dyn smem KiB | grid | "
          "M warp instr/step | issue slots busy % | warp cycles/instr | top stalls (cycles/instr) |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|")
    for arg in sys.argv[3:]:
        mode, path = arg.split("=", 1)
        for step, per_kernel in sorted(summarize(path, n_layer, steps).items()):
            step_time = step_read = 0.0
            step_inst = 0.0
            for name, items in per_kernel.items():
                n = len(items)
                def avg(key, items=items, n=n):
                    return sum(m.get(key, 0.0) for m, _ in items if not isinstance(m.get(key), str)) / n
                st = defaultdict(float)
                for _, s in items:
                    for k, v in s.items():
                        st[k] += v / n
                top = ", ".join(f"{k} {v:.1f}" for k, v in sorted(st.items(), key=lambda kv: -kv[1])[:3])
                total = sum(m.get("time", 0.0) for m, _ in items)
                read = sum(m.get("dram_read", 0.0) for m, _ in items)
                rate = read / (total * 1e3) if total else 0.0  # bytes per ns = GB/s
                inst = sum(m.get("inst", 0.0) for m, _ in items)
                has = all("inst" in m for m, _ in items)
                step_time, step_read = step_time + total, step_read + read
                step_inst = step_inst + inst if has and step_inst is not None else None
                issued = f"{inst / 1e6:.2f} | {avg('issue_pct'):.1f}" if has else "- | -"
                print(f"| {mode} | {step} | `{name}` | {n} | {total:.1f} | {avg('time'):.2f} | {read / 1e6:.1f} | "
                      f"{rate:.0f} | {avg('dram_pct'):.1f} | {avg('occupancy'):.1f} | {avg('theoretical'):.1f} | "
                      f"{avg('waves'):.2f} | {avg('registers'):.0f} | {avg('smem_dyn') / 1024:.1f} | "
                      f"{items[-1][0].get('grid', '')} | {issued} | {avg('cpi'):.1f} | {top} |")
            rate = step_read / (step_time * 1e3) if step_time else 0.0
            inst = f"**{step_inst / 1e6:.2f}**" if step_inst is not None else "-"
            print(f"| {mode} | {step} | **all** | | **{step_time:.1f}** | | **{step_read / 1e6:.1f}** | **{rate:.0f}** "
                  f"| | | | | | | | {inst} | | | |")


if __name__ == "__main__":
    main()
