"""Derive the MI300X FP8 GEMM efficiency-by-M curve in data/efficiency.json from ROCm/aiter's tuned GEMM table.

The table: aiter/configs/a8w8_tuned_gemm.csv at ROCm/aiter commit 41fa6c4f73 ("[MI300X] tune gemm config for llama
70b/405b", 2025-09-26; the rows are unchanged through 2025-11): per-token FP8 (W8A8 rowwise, CK) GEMMs tuned on
MI300X (cu_num 304) at the Llama-3 70B/405B layer shapes for TP 1/4/8, M = 1..16384, with the measured us of
the best kernel. For each M the curve is the median over the shapes whose FP8 weight is at least 32 MB (the
layers of a large model; smaller weights reach less) of 2 M N K / (us x 2614.9 TFLOP/s), the dense FP8 peak
in gpus.json. Nothing here is fitted: it is a median of measured kernel times.

Usage (a checkout of ROCm/aiter; nothing is fetched):
    git -C aiter show 41fa6c4f73:aiter/configs/a8w8_tuned_gemm.csv > a8w8_tuned_gemm.csv
    python bench/gemm_curve_mi300x.py a8w8_tuned_gemm.csv
prints the "m" and "fraction" lists as they are in data/efficiency.json (gpus.mi300x.gemm_fp8_by_m).
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from collections import defaultdict

FP8_PEAK_FLOPS = 2614.9e12  # gpus.json mi300x fp8_flops (dense)
CU_NUM = "304"  # MI300X (MI308X tables carry 80)
MIN_WEIGHT_BYTES = 32e6


def curve(path: str) -> dict:
    by_m: dict[int, list[float]] = defaultdict(list)
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            if row.get("cu_num") != CU_NUM:
                continue
            m, n, k, us = int(row["M"]), int(row["N"]), int(row["K"]), float(row["us"])
            if n * k < MIN_WEIGHT_BYTES:  # one byte per FP8 weight
                continue
            by_m[m].append(2.0 * m * n * k / (us * 1e-6) / FP8_PEAK_FLOPS)
    ms = sorted(by_m)
    return {
        "m": ms,
        "fraction": [round(statistics.median(by_m[m]), 4) for m in ms],
        "shapes": {str(m): len(by_m[m]) for m in ms},
    }


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python bench/gemm_curve_mi300x.py PATH/TO/a8w8_tuned_gemm.csv")
    print(json.dumps(curve(sys.argv[1])))
