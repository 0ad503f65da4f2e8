"""Smoke test of benchmarks/bench.py (the figures themselves are measured by `make bench`, not
by tests): one small ORL run in a subprocess writes every figure the README's table reads."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_bench_writes_its_figures(tmp_path):
    out = tmp_path / "bench.json"
    # Random images of ORL's shape: the figures need the shape only, not the data.
    env = {**os.environ, "MESC_DATA_DIR": str(tmp_path / "no-data")}
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench.py"), "--datasets", "orl",
         "--warmup", "1", "--repeats", "2", "--jit", "off", "--post", "fast,reference",
         "--json", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (res,) = json.loads(out.read_text())["results"]
    assert res["dataset"] == "orl" and res["data"] == "random" and res["n"] == 400
    assert len(res["steps_ms_all"]["off"]) == 3 and res["step_ms"]["off"] > 0
    for key in ("floor_ms", "autoencoder_ms", "original_step_ms", "peak_rss_gib"):
        assert res[key] > 0, key
    assert {"fast", "reference"} <= set(res["post"])
    assert isinstance(res["labels_fast_equal_reference"], bool)
    assert "orl" in proc.stdout and "AE ms" in proc.stdout  # the printed table
