"""experiments/sweep.py, experiments/table.py and their engine mesc_tf/sweep.py.

Fast: grid parsing, planning and the results file need no training; the real runs use tiny
problems (toy: 216 images, 4 steps; ORL: 2 steps, one method, 2 seeds).
"""

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mesc_tf
from mesc_tf import sources, sweep
from mesc_tf.provenance import code_revision
from mesc_tf.config import TRAIN_FIELDS, Settings, method_settings
from mesc_tf.errors import MescError
from scripts import load_script  # tests/scripts.py

REPO = Path(__file__).resolve().parents[1]


def _script(name):
    return load_script(f"experiments/{name}.py", f"_exp_{name}")


# --- grids, seeds, plans ---------------------------------------------------------------------


def test_parse_grid_types_and_order():
    grid = sweep.parse_grid("reg1=0.5,1,2 epochs=100,200,100 thr=3e-2 variant=mesc,dsc")
    assert grid == {"reg1": [0.5, 1.0, 2.0], "epochs": [100, 200], "thr": [0.03],
                    "variant": ["mesc", "dsc"]}
    assert isinstance(grid["epochs"][0], int) and isinstance(grid["reg1"][1], float)
    assert sweep.parse_grid(["reg1=1", "subspace-dim=3,4"]) == {"reg1": [1.0],
                                                                "subspace_dim": [3, 4]}
    assert sweep.parse_grid("") == {}
    assert sweep.parse_seeds("0-2,5") == [0, 1, 2, 5]
    assert sweep.parse_seeds(["0, 1 4-5", "7"]) == [0, 1, 4, 5, 7]


@pytest.mark.parametrize("bad, message", [("0,-1", "from 0 to 4294967295, got -1"),
                                          ("1-4294967296", "got 4294967296"),
                                          ("0-4294967295", "spans more than"),
                                          ("4-2", "empty range"), ("a", "not a whole number"),
                                          ("0,,1", "an empty value in '0,,1'"),
                                          ("0,", "an empty value"), ("+1", "not a whole number"),
                                          ("\u0663", "not a whole number"),
                                          ("1_0", "not a whole number"),
                                          ("4-+5", "not a whole number")])
def test_bad_seeds_are_one_line(bad, message):
    with pytest.raises(MescError, match=message) as e:
        sweep.parse_seeds(bad)
    assert "\n" not in str(e.value) and str(e.value).startswith("--seeds:")


def test_table_with_a_bad_seed_writes_nothing(tmp_path, capsys):
    mod = _script("table")
    with pytest.raises(SystemExit) as e:
        mod.main(["--datasets", "orl", "--seeds", "0,-1", "--out", str(tmp_path)])
    assert e.value.code == 2 and not list(tmp_path.iterdir())
    assert "--seeds: a seed must be" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["reg1", "reg1=", "nope=1", "reg1=x", "epochs=1.5", "thr=inf",
                                 "reg1=1 reg1=2", "=1", "reg1=1,,2", "reg1=1,"])
def test_parse_grid_errors_are_one_line(bad):
    with pytest.raises(MescError) as e:
        sweep.parse_grid(bad)
    assert "\n" not in str(e.value) and str(e.value).startswith("grid:")


def test_invalid_setting_in_grid_is_refused():
    """Before any training, naming the grid's entry."""
    with pytest.raises(MescError, match=r"^grid: thr=-1.0: thr \(--thr\) must be a finite number"):
        sweep.parse_grid("thr=0.1,-1")
    with pytest.raises(MescError, match=r"^grid: reg1 value 'abc' is not a number; write e.g\."):
        sweep.parse_grid("reg1=abc")


def test_a_missing_auto_encoder_names_the_options_as_the_command_takes_them(tmp_path,
                                                                            monkeypatch):
    monkeypatch.setenv("MESC_PRETRAINED_DIR", str(tmp_path))
    with pytest.raises(MescError,
                       match="pass --weights PATH, --tf1-checkpoint PREFIX or --no-pretrain"):
        sources.resolve_autoencoder("orl")
    with pytest.raises(MescError, match="--weights orl=PATH, --tf1-checkpoint orl=PREFIX or"):
        sources.resolve_autoencoder("orl", per_dataset=True)


def test_whole_number_settings_are_stored_as_int():
    """JSON and grids may give 2000.0 steps; Keras' fit needs an int."""
    s = Settings(epochs=2000.0, subspace_dim=np.float64(12))
    assert (s.epochs, s.subspace_dim) == (2000, 12) and type(s.epochs) is int
    assert type(s.subspace_dim) is int
    for bad in (float("inf"), float("nan"), 2.5):
        with pytest.raises(MescError, match=r"epochs \(--epochs\) must be a whole number"):
            Settings(epochs=bad)


def test_settings_bounds():
    """Zero weights are allowed (the ablations); a zero d, power or thr, or an infinite lr, is
    refused before any training; seeds span 0..2³²−1; paper_lambdas is reg / 4."""
    from mesc_tf.config import Architecture, check_seed, paper_lambdas

    Settings(reg1=0.0, reg2=0.0, recon_scale=0.0)
    for bad in ({"subspace_dim": 0}, {"power": 0.0}, {"lr": float("inf")}, {"thr": 0.0}):
        with pytest.raises(MescError, match=f"{next(iter(bad))} .* must be"):
            Settings(**bad)
    assert check_seed(2**32 - 1) == 2**32 - 1
    with pytest.raises(MescError, match="seed must be a whole number from 0 to 4294967295, got "
                                        "True"):
        check_seed(True)  # operator.index took it for 1
    with pytest.raises(MescError, match="image_shape"):
        Architecture((0, 32), (3,), (5,))
    assert paper_lambdas(1.0, 0.1) == pytest.approx((0.25, 0.025))


def test_cli_bad_grid_is_one_line_exit_2():
    p = subprocess.run([sys.executable, str(REPO / "experiments" / "sweep.py"), "--dataset", "orl",
                        "--grid", "reg1=1 bogus=2", "--dry-run"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("error: grid: unknown field 'bogus'")


def test_cli_dry_run_and_summary_only_together_are_refused():
    from experiments import sweep as sweep_script

    with pytest.raises(SystemExit) as e:
        sweep_script.parse_args(["--dataset", "orl", "--dry-run", "--summary-only"])
    assert e.value.code == 2


def test_cli_unusable_coef_cache_is_one_line_exit_2(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    p = subprocess.run([sys.executable, str(REPO / "experiments" / "sweep.py"), "--dataset", "orl",
                        "--coef-cache", str(blocker / "cache"), "--dry-run"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    assert p.stderr.startswith("error: --coef-cache: output directory")
    assert "a-file is a file)" in p.stderr


def test_coef_cache_is_made_by_the_first_c_it_keeps(synthetic_data, tmp_path, capsys,
                                                    monkeypatch):
    """Checked at once, but a run that stores nothing (--dry-run, --summary-only) leaves no
    folder; the first C stored makes it, and reads back."""
    monkeypatch.setenv("MESC_DATA_DIR", str(synthetic_data))
    script = _script("sweep")
    cache, out = tmp_path / "a" / "c", tmp_path / "records" / "toy.jsonl"
    for flag in ("--dry-run", "--summary-only"):
        argv = ["--dataset", "toy", "--coef-cache", str(cache), "--out", str(out), flag]
        assert script.parse_args(argv).coef_cache
        if flag == "--dry-run":
            assert script.main(argv) == 0
        else:  # a file that is not there (a mistyped --out) has nothing to summarize
            with pytest.raises(MescError, match="no sweep results at .*toy.jsonl to summarize"):
                script.main(argv)
        assert not list(tmp_path.iterdir()), flag
    coef = np.arange(9, dtype=np.float32).reshape(3, 3)
    sweep.cache_store(cache, "k", coef, 1.5)
    stored, seconds = sweep.cache_load(cache, "k", 3)
    np.testing.assert_array_equal(stored, coef)
    assert seconds == 1.5 and sweep.cache_load(cache, "other", 3) is None
    assert sweep.cache_has(cache, "k") and not sweep.cache_has(cache, "other")
    # An entry whose C is an empty file (not what cache_store writes) is absent, not an error.
    sweep._cache_paths(cache, "k")[0].write_bytes(b"")
    assert sweep.cache_load(cache, "k", 3) is None and not sweep.cache_has(cache, "k")


def test_our_wo_net_takes_a_datasets_coupled_settings():
    from mesc_tf.config import get_config

    eyaleb, orl = get_config("eyaleb"), get_config("orl")
    assert eyaleb.coupled is None  # inherits MESC-Net's settings, on the coupled graph
    assert method_settings("eyaleb", "our_wo_net") == eyaleb.mesc.replace(framework="coupled")
    s = method_settings("orl", "our_wo_net")
    assert (s.framework, s.regularizer, s.epochs) == ("coupled", "entropy", orl.coupled.epochs)
    assert s != orl.mesc.replace(framework="coupled")
    # The table's own "Our w/o Net" rows say the graph they run on.
    assert orl.coupled == s and orl.coupled.framework == "coupled"


def test_plan_shares_training_across_post_settings_seeds_and_steps():
    base = method_settings("toy", "our")
    settings = sweep.expand_grid(base, sweep.parse_grid("reg1=1,2 epochs=5,10 thr=0.1,0.2"))
    ae = sources.AutoencoderSpec("weights", "x.h5", "0" * 64)
    groups, skipped = sweep.plan(settings, [0, 1], ae, "toy")
    assert skipped == 0 and len(groups) == 2  # one training per reg1
    assert all(g.train.epochs == 10 and g.steps == [5, 10] and len(g.trials) == 8 for g in groups)
    # Without pretraining the seed changes the initial weights: one training per seed too.
    groups, _ = sweep.plan(settings, [0, 1], sources.AutoencoderSpec("none"), "toy")
    assert len(groups) == 4 and sorted(g.init_seed for g in groups) == [0, 0, 1, 1]
    # Resume: finished trials are skipped, a group with nothing left is not trained.
    done = {sweep.trial_key("toy", ae.ident, s, seed) for s in settings if s.reg1 == 1
            for seed in (0, 1)}
    groups, skipped = sweep.plan(settings, [0, 1], ae, "toy", done)
    assert skipped == 8 and len(groups) == 1 and groups[0].train.reg1 == 2


_REC = {"dataset": "toy", "autoencoder_id": "none", "settings": Settings().to_dict(), "seed": 0,
        "metrics": None, "error": None, "timings": {}}  # the least a record holds


def test_results_file_survives_a_torn_line(tmp_path):
    out = tmp_path / "s.jsonl"
    rec = _REC
    sweep.append_jsonl(out, rec)
    with open(out, "a") as f:
        f.write('{"dataset": "toy", "autoenc')  # a kill in the middle of a write
    sweep.append_jsonl(out, {**rec, "seed": 1})
    records, torn = sweep.read_records(out)
    assert [r["seed"] for r in records] == [0, 1] and torn == [(out, 2)]
    assert sweep.torn_notes(torn) == [f"note: {out}: line 2 unreadable (torn by a kill), "
                                      "skipped; a trial missing from the file is run again"]
    assert sweep.torn_notes([(out, n) for n in range(1, 13)])[0].startswith(
        f"note: {out}: lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 2 more unreadable")
    assert sweep.done_keys(records) == {sweep.trial_key("toy", "none", Settings(), s)
                                        for s in (0, 1)}
    # A file that is not a sweep's (a results.json, say) is refused, not appended to.
    other = tmp_path / "results.json"
    other.write_text(json.dumps({"settings": rec["settings"]}, indent=1))
    with pytest.raises(MescError, match=r"results.json is not a file of sweep results \(line 1"):
        sweep.read_records(other)


def test_archive_parts_are_read_before_the_file(tmp_path):
    """Records in <stem>.partN.jsonl (a finished file renamed) still count as done, in numeric
    order of N and before the plain file; new ones go to the plain file; a part that is not
    text is one clear error."""
    out = tmp_path / "s.jsonl"
    rec = _REC
    for seed, part in ((0, 2), (1, 10)):  # part 10 after part 2: numeric, not lexical, order
        sweep.append_jsonl(out, {**rec, "seed": seed})
        out.rename(tmp_path / f"s.part{part}.jsonl")
    (tmp_path / "s.partx.jsonl").write_text("not a part\n")  # not a numbered part: ignored
    sweep.append_jsonl(out, {**rec, "seed": 2})
    records, torn = sweep.read_records(out)
    assert [r["seed"] for r in records] == [0, 1, 2] and torn == []
    assert [p.name for p in sweep.archive_paths(out)] == ["s.part2.jsonl", "s.part10.jsonl"]
    (tmp_path / "s.part2.jsonl").write_bytes(b"\x1f\x8b\x08\xff binary")
    with pytest.raises(MescError, match="cannot read the sweep results .*s.part2.jsonl"):
        sweep.read_records(out)
    with pytest.raises(MescError, match="results .* is a folder; pass the path of a .jsonl"):
        sweep.read_records(tmp_path)


def test_summary_only_keeps_the_chosen_autoencoders_records(toy_weights, tmp_path, capsys):
    """A results file mixes auto-encoders; --summary-only ranks those of --weights (or the
    default file) alone, whichever way the file was named when the trials ran."""
    ident = sources.resolve_autoencoder("toy", weights=str(toy_weights)).ident
    out = tmp_path / "toy.jsonl"
    for ae_id, reg1, acc in ((ident, 1.0, 0.5), ("pretrained:" + ident.split(":")[1], 2.0, 0.6),
                             ("weights:0123456789abcdef", 3.0, 0.9)):
        sweep.append_jsonl(out, {"dataset": "toy", "autoencoder_id": ae_id, "seed": 0,
                                 "error": None, "settings": Settings(reg1=reg1).to_dict(),
                                 "timings": {}, "metrics": {"acc": acc, "nmi": acc}})
    _script("sweep").main(["--dataset", "toy", "--summary-only", "--weights", str(toy_weights),
                           "--out", str(out)])
    printed = capsys.readouterr().out
    assert printed.startswith("2 of the file's records come from weights")
    assert "90.00" not in printed and "60.00" in printed and "50.00" in printed


def test_sweep_refuses_a_results_file_with_trials_of_other_data(synthetic_data, toy_weights,
                                                                tmp_path, monkeypatch):
    """A trial records the SHA-256 of its data files: a sweep whose results file holds trials of
    the same dataset made from other files is refused in one error (it would reuse them under
    the same keys); records without data files (older ones) and other datasets' pass."""
    from mesc_tf.data import load_dataset

    monkeypatch.setenv("MESC_DATA_DIR", str(synthetic_data))
    now = load_dataset("toy").file_hashes
    out = tmp_path / "toy.jsonl"
    argv = ["--dataset", "toy", "--weights", str(toy_weights), "--out", str(out), "--grid",
            "epochs=2", "--dry-run"]
    for rec in (_REC, {**_REC, "seed": 1, "data_files": now},
                {**_REC, "dataset": "orl", "data_files": {"ORL_32x32.mat": "0" * 64}}):
        sweep.append_jsonl(out, rec)
    assert _script("sweep").main(argv) == 0
    sweep.append_jsonl(out, {**_REC, "seed": 2, "data_files": {"COIL20.mat": "0" * 64}})
    with pytest.raises(MescError, match=r"1 of its toy trials were made from other data files "
                       r"\(COIL20.mat: sha256 000000000000… then, "):
        _script("sweep").main(argv)


def test_an_autoencoder_counts_by_content_however_it_was_named():
    """Trials and table cells made with pretrained/toy.h5 taken by default are reused when the
    same file is named with --weights, and the other way round (committed records keep their
    'pretrained:...' idents)."""
    table = _script("table")
    h = "523de47f455912c4" + "0" * 48
    default = sources.AutoencoderSpec("pretrained", "/repo/pretrained/toy.h5", h)
    named = sources.AutoencoderSpec("weights", "/elsewhere/toy.h5", h)
    other = sources.AutoencoderSpec("weights", "/elsewhere/x.h5", "f" * 64)
    s = Settings(reg1=2.0)
    done = sweep.done_keys([{"dataset": "toy", "autoencoder_id": default.ident, "seed": 0,
                             "settings": s.to_dict()}])
    assert sweep.plan([s], [0], named, "toy", done)[1] == 1
    assert sweep.plan([s], [0], other, "toy", done)[1] == 0
    cell = {"settings": sweep.normalized(s), "seeds_requested": [0],
            "autoencoder_id": default.ident, "max_epochs": None}
    assert table.cell_is_current(cell, s, [0], named)
    assert not table.cell_is_current(cell, s, [0], other)
    recs = [{"dataset": "toy", "autoencoder_id": ae.ident, "seed": seed, "error": None,
             "settings": s.to_dict(), "timings": {}, "metrics": {"acc": 0.5, "nmi": 0.5}}
            for ae, seed in ((default, 0), (named, 1))]
    assert [r["seeds"] for r in sweep.summarize(recs)] == [[0, 1]]  # one setting, two seeds


def test_summary_ranks_by_median_acc():
    def rec(reg1, seed, acc, nmi=None):
        return {"dataset": "toy", "autoencoder_id": "none", "seed": seed, "error": None,
                "settings": Settings(reg1=reg1).to_dict(), "timings": {},
                "metrics": {"acc": acc, "nmi": acc if nmi is None else nmi}}

    records = [rec(1.0, 0, 0.9), rec(1.0, 1, 0.1), rec(1.0, 2, 0.2),  # mean 0.4, median 0.2
               rec(2.0, 0, 0.3), rec(2.0, 1, 0.3), rec(2.0, 2, 0.3)]
    rows = sweep.summarize(records)
    assert [r["settings"]["reg1"] for r in rows] == [2.0, 1.0]
    assert rows[1]["acc_stats"]["mean"] == pytest.approx(0.4)
    text = sweep.format_summary(rows)
    assert "reg1" in text and "30.00 ± 0.00" in text
    # Equal ACC: the higher median NMI first, whatever the order read; a setting with fewer
    # finished seeds (one seed at 0.95, say) after the complete ones.
    records = [*(rec(3.0, seed, 0.5, 0.6) for seed in range(3)),
               *(rec(4.0, seed, 0.5, 0.7) for seed in range(3)), rec(5.0, 0, 0.95)]
    assert [r["settings"]["reg1"] for r in sweep.summarize(records)] == [4.0, 3.0, 5.0]
    # A trial recorded twice counts once: the first success (a failure retried with
    # --retry-errors; a record a killed sweep's worker wrote as well as the rerun).
    failed = {**rec(6.0, 1, 0.0), "error": "ArpackError", "metrics": None}
    records = [rec(6.0, 0, 0.4), failed, rec(6.0, 1, 0.6), rec(6.0, 0, 0.4)]
    (row,) = sweep.summarize(records)
    assert row["seeds"] == [0, 1] and row["errors"] == 0 and row["acc"] == [0.4, 0.6]


def test_a_worker_of_a_killed_sweep_stops(tmp_path):
    """A loky worker outlives a SIGKILLed sweep; told its parent's pid, it checks that the
    parent is still its parent before training and before writing each record."""
    import os

    with pytest.raises(RuntimeError, match="sweep process .* is gone"):
        sweep.run_group(None, dataset="toy", data_dir=None, ae=None, out=tmp_path / "r.jsonl",
                        parent_pid=os.getppid() + 1)
    assert not list(tmp_path.iterdir())
    sweep._check_parent(os.getppid())  # still there: nothing raised


def test_a_worker_whose_sweep_dies_while_it_clusters_writes_no_more_records(tmp_path,
                                                                            monkeypatch):
    """The second check: the parent is gone after the training, before a record is written."""
    import os

    parent = os.getppid()
    answers = iter([parent])  # the first check (before training) sees the parent
    monkeypatch.setattr(sweep.os, "getppid", lambda: next(answers, 1))
    monkeypatch.setattr(sweep, "_dataset", lambda *args: None)
    monkeypatch.setattr(sweep, "_trained_coefs", lambda *args: None)
    monkeypatch.setattr(sweep, "_scored_trial", lambda *args: {"trial": 1})
    s = Settings()
    group = sweep.Group(s, (sweep.Trial(s, 0),), 0, tag="our")
    with pytest.raises(RuntimeError, match=f"the sweep process {parent} is gone"):
        sweep.run_group(group, dataset="toy", data_dir=None, ae=None,
                        out=tmp_path / "r.jsonl", parent_pid=parent)
    assert not list(tmp_path.iterdir())


# --- real runs ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def toy_weights(tmp_path_factory):
    """A he_normal toy auto-encoder saved as .h5 (seeded), so fine-tuning is deterministic."""
    from mesc_tf.config import get_config
    from mesc_tf.model import ConvAutoEncoder
    from mesc_tf.training import configure_runtime
    from mesc_tf.weights import save_autoencoder

    configure_runtime(0)
    ae = ConvAutoEncoder(get_config("toy").arch).build_for_input()
    return save_autoencoder(ae, tmp_path_factory.mktemp("ae") / "toy.h5")


def test_thread_limit_reaches_blas_in_this_process_and_needs_a_worker_otherwise(monkeypatch):
    """A group run in this process gets the BLAS limit (TF's is set before TF starts); a thread
    limit with --jobs above 1 sends even a single group to a fresh worker."""
    from threadpoolctl import threadpool_info

    def blas_threads():
        return sorted({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"})

    assert sweep._in_parent(1, 3, 1) and sweep._in_parent(2, 1, None)
    assert not sweep._in_parent(2, 1, 1) and not sweep._in_parent(2, 2, None)
    monkeypatch.setattr(sweep, "run_group", lambda g, threads=None, **kw: blas_threads())
    before = blas_threads()
    if before == [1]:
        pytest.skip("BLAS runs one thread here already")
    assert list(sweep.run_groups(["g"], jobs=1, threads=1)) == [[1]]
    assert blas_threads() == before


def test_tf1_checkpoint_may_be_named_by_one_of_its_files(synthetic_tf1):
    """As run.py takes it (README: PREFIX or one of its files), so do sweeps and tables."""
    prefix = synthetic_tf1["orl"]
    want = sources.resolve_autoencoder("orl", tf1_checkpoint=str(prefix))
    for f in (f"{prefix}.index", next(prefix.parent.glob(f"{prefix.name}.data-*"))):
        assert sources.resolve_autoencoder("orl", tf1_checkpoint=str(f)) == want


def test_snapshot_equals_a_shorter_run(toy_weights):
    """C after 2 steps of a 4-step run is the C of a 2-step run (the steps sweep relies on it)."""
    from mesc_tf import pipeline
    from mesc_tf.weights import load_autoencoder

    x = np.random.default_rng(0).random((24, 32, 32, 1), dtype=np.float32)
    s = method_settings("toy", "our").replace(lr=1e-3)
    snaps = sweep.coef_snapshots([2, 4])
    model, _, _ = pipeline.fine_tune(x, s.replace(epochs=4), load_autoencoder(toy_weights)[0],
                                     verbose=0, callbacks=[snaps])
    short, _, _ = pipeline.fine_tune(x, s.replace(epochs=2), load_autoencoder(toy_weights)[0],
                                     verbose=0)
    assert sorted(snaps.coefs) == [2, 4]
    np.testing.assert_array_equal(snaps.coefs[4], model.coef.numpy())
    np.testing.assert_array_equal(snaps.coefs[2], short.coef.numpy())
    assert not np.array_equal(snaps.coefs[2], snaps.coefs[4])


def test_tiny_sweep_writes_lines_and_resumes(shared_data, toy_weights, tmp_path, capsys,
                                             monkeypatch):
    monkeypatch.setenv("MESC_DATA_DIR", str(shared_data))
    mod = _script("sweep")
    out = tmp_path / "toy.jsonl"
    argv = ["--dataset", "toy", "--weights", str(toy_weights), "--jobs", "1", "--out", str(out),
            "--seeds", "0,1", "--grid", "epochs=2,4 thr=0.1,0.3"]
    mod.main(argv)
    records, bad = sweep.read_records(out)
    assert len(records) == 8 and bad == []
    r = records[0]
    assert set(r["metrics"]) >= {"acc", "nmi"} and r["timings"]["steps"] in (2, 4)
    assert r["shared_training"] == {"steps_run": 4, "snapshots": [2, 4], "trials": 8}
    # What post-clustering did, as run.py records it (it was missing from sweeps).
    assert r["postcluster"]["method"] == "fast" and 1 <= r["postcluster"]["clusters_found"] <= 3
    assert r["code"] == code_revision()  # the commit the trial ran (not part of its key)
    assert r["data_files"] == {"COIL20.mat": hashlib.sha256(
        (shared_data / "COIL20.mat").read_bytes()).hexdigest()}
    assert "best settings by median ACC" in capsys.readouterr().out

    # A killed sweep (three lines lost, one torn), rerun with a larger grid: only the lost
    # trials and the new ones run; then a rerun of a finished sweep runs nothing.
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:5]) + lines[5][:40])
    argv[-1] = "epochs=2,4 thr=0.1,0.3,0.5"
    mod.main(argv)
    assert "5 already in" in capsys.readouterr().out
    records, bad = sweep.read_records(out)
    assert len(records) == 12 and len(sweep.done_keys(records)) == 12 and bad == [(out, 6)]
    mod.main(argv)
    printed = capsys.readouterr().out
    assert "12 already in" in printed and "0 to run in 0 trainings" in printed
    assert len(sweep.read_records(out)[0]) == 12


def test_unwritable_outputs_fail_before_training(synthetic_data, toy_weights, tmp_path, capsys,
                                                 monkeypatch):
    """--out under a file: one error line before any training, nothing written."""
    from mesc_tf import cli

    monkeypatch.setenv("MESC_DATA_DIR", str(synthetic_data))
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    sweep_argv = ["--dataset", "toy", "--weights", str(toy_weights), "--jobs", "1",
                  "--grid", "epochs=2", "--out", str(blocker / "toy.jsonl")]
    table_argv = ["--datasets", "toy", "--methods", "our", "--seeds", "0", "--max-epochs", "2",
                  "--out", str(blocker / "table")]
    for name, argv in (("sweep", sweep_argv), ("table", table_argv)):
        mod = _script(name)
        capsys.readouterr()
        with pytest.raises(SystemExit) as e:
            cli.main_guard(lambda: mod.main(argv))
        out, err = capsys.readouterr()
        assert e.value.code == 2 and err.count("\n") == 1, err
        assert "is not writable" in err or "cannot write" in err, err
        assert "[1/" not in out  # no training ran
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_a_sweep_that_fails_before_its_first_record_leaves_no_folder(toy_weights, tmp_path):
    (tmp_path / "data").mkdir()  # no COIL20.mat: the worker's data loading fails
    argv = ["--dataset", "toy", "--weights", str(toy_weights), "--jobs", "1", "--grid",
            "epochs=2", "--data-dir", str(tmp_path / "data"), "--out",
            str(tmp_path / "new" / "toy.jsonl"), "--coef-cache", str(tmp_path / "cache")]
    with pytest.raises(MescError, match="data file not found"):
        _script("sweep").main(argv)
    assert [p.name for p in tmp_path.iterdir()] == ["data"]


def test_coef_cache_skips_training_and_gives_the_same_trials(shared_data, toy_weights,
                                                             tmp_path, capsys, monkeypatch):
    """A sweep with --coef-cache stores C; a second sweep of other post-clustering settings
    reads it without training and scores exactly as training again would; a damaged cache
    entry is trained again, not trusted."""
    monkeypatch.setenv("MESC_DATA_DIR", str(shared_data))
    mod = _script("sweep")
    cache = tmp_path / "cache"
    base = ["--dataset", "toy", "--weights", str(toy_weights), "--jobs", "1", "--seeds", "0"]
    mod.main([*base, "--out", str(tmp_path / "a.jsonl"), "--coef-cache", str(cache),
              "--grid", "epochs=2,3 thr=0.1"])
    assert len(list(cache.glob("*.npy"))) == 2 and len(list(cache.glob("*.json"))) == 2
    assert not list(cache.glob(".*"))  # no temporary files left
    written = sweep.read_records(tmp_path / "a.jsonl")[0]
    assert {r["shared_training"]["coef_cache"] for r in written} == {"written"}
    capsys.readouterr()

    grid = ["--grid", "epochs=2,3 thr=0.1,0.3"]
    mod.main([*base, "--out", str(tmp_path / "b.jsonl"), "--coef-cache", str(cache), *grid,
              "--dry-run"])  # the run's own entries: the dry run finds them
    assert "4 to run in 0 trainings (0 steps in all) and 1 with" in capsys.readouterr().out
    mod.main([*base, "--out", str(tmp_path / "b.jsonl"), "--coef-cache", str(cache), *grid])
    assert "C from the cache" in capsys.readouterr().out
    read = sweep.read_records(tmp_path / "b.jsonl")[0]
    assert {r["shared_training"]["coef_cache"] for r in read} == {"read"}
    assert {r["shared_training"]["steps_run"] for r in read} == {0}
    mod.main([*base, "--out", str(tmp_path / "c.jsonl"), *grid])  # no cache: trains
    fresh = sweep.read_records(tmp_path / "c.jsonl")[0]

    def scores(recs):
        return {sweep.record_key(r): r["metrics"] for r in recs}

    assert scores(read) == scores(fresh) and len(fresh) == 4

    # One entry damaged (truncated .npy): that group is trained again and the entry rewritten.
    victim = sorted(cache.glob("*.npy"))[0]
    victim.write_bytes(victim.read_bytes()[:100])
    mod.main([*base, "--out", str(tmp_path / "d.jsonl"), "--coef-cache", str(cache), *grid])
    assert "steps in" in capsys.readouterr().out
    again = sweep.read_records(tmp_path / "d.jsonl")[0]
    assert {r["shared_training"]["coef_cache"] for r in again} == {"written"}
    assert scores(again) == scores(fresh)
    assert np.load(victim).shape == (216, 216)


def test_a_coef_cache_that_cannot_be_written_keeps_the_trials(shared_data, toy_weights,
                                                              tmp_path, capsys, monkeypatch):
    """A C that cannot be stored (a full disk) is said in one warning line; the trials trained
    from it are recorded all the same. The writer's MescError used to escape the OSError
    handler, and the group's training was lost."""
    from mesc_tf import files

    def disk_full(path, array):
        raise files.write_error(path, OSError(28, "No space left on device"))  # ENOSPC

    monkeypatch.setenv("MESC_DATA_DIR", str(shared_data))
    monkeypatch.setattr(files, "save_npy", disk_full)
    cache = tmp_path / "cache"
    _script("sweep").main(["--dataset", "toy", "--weights", str(toy_weights), "--jobs", "1",
                           "--seeds", "0", "--grid", "epochs=2 thr=0.1,0.3", "--out",
                           str(tmp_path / "a.jsonl"), "--coef-cache", str(cache)])
    err = capsys.readouterr().err
    assert re.search(rf"^warning: its C's are not in the --coef-cache: cannot write "
                     rf"{re.escape(str(cache))}/\w+\.npy \(.*No space left on device\); the "
                     "disk is full", err, re.M)
    recs = sweep.read_records(tmp_path / "a.jsonl")[0]
    assert len(recs) == 2 and not any(r["error"] for r in recs)
    assert {r["shared_training"]["coef_cache"] for r in recs} == {"not written"}


def test_coef_cache_is_not_read_for_other_data(shared_data, toy_weights, tmp_path, capsys):
    """A C trained on one data file is not read from the cache by a sweep on another (same
    shape, other pixels): the key holds the data files' SHA-256, so that sweep trains."""
    import scipy.io

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    coil = data_dir / "COIL20.mat"
    coil.write_bytes((shared_data / "COIL20.mat").read_bytes())
    base = ["--dataset", "toy", "--weights", str(toy_weights), "--jobs", "1", "--seeds", "0",
            "--grid", "epochs=2", "--data-dir", str(data_dir), "--coef-cache",
            str(tmp_path / "cache")]
    _script("sweep").main([*base, "--out", str(tmp_path / "a.jsonl")])
    mat = scipy.io.loadmat(str(coil))
    scipy.io.savemat(str(coil), {"fea": mat["fea"] * 0.5, "gnd": mat["gnd"]})
    sweep._DATA_CACHE.clear()  # --jobs 1 loads in this process; a new command loads it anew
    capsys.readouterr()
    _script("sweep").main([*base, "--out", str(tmp_path / "b.jsonl")])
    assert "C from the cache" not in capsys.readouterr().out
    rec, = sweep.read_records(tmp_path / "b.jsonl")[0]
    assert rec["shared_training"]["coef_cache"] == "written"
    assert rec["data_files"]["COIL20.mat"] == hashlib.sha256(coil.read_bytes()).hexdigest()


def test_dry_run_counts_only_the_trainings_the_coef_cache_does_not_supply(
        synthetic_data, toy_weights, tmp_path, capsys, monkeypatch):
    """A training whose C's (every step count of its group) are in --coef-cache is read, not
    run: the --dry-run's count of trainings and steps leaves it out and says so."""
    monkeypatch.setenv("MESC_DATA_DIR", str(synthetic_data))
    from mesc_tf.data import load_dataset

    ae = sources.resolve_autoencoder("toy", weights=str(toy_weights))
    cache = tmp_path / "cache"
    train = method_settings("toy", "our").replace(reg1=1.0)
    files = load_dataset("toy").file_hashes
    for steps in (2, 3):  # reg1=1's training, at both step counts of the grid
        sweep.cache_store(cache, sweep.coef_cache_key("toy", ae.ident, train, steps,
                                                      data_files=files),
                          np.zeros((216, 216), np.float32), 1.0)
    argv = ["--dataset", "toy", "--weights", str(toy_weights), "--jobs", "1", "--grid",
            "epochs=2,3 reg1=1,2", "--coef-cache", str(cache), "--out",
            str(tmp_path / "s.jsonl"), "--dry-run"]
    _script("sweep").main(argv)
    assert ("4 to run in 1 trainings (3 steps in all) and 1 with every C in the "
            f"--coef-cache {cache} (read, not trained), --jobs 1") in capsys.readouterr().out
    sweep.cache_store(cache, sweep.coef_cache_key("toy", ae.ident, train.replace(reg1=2.0), 2,
                                                  data_files=files),
                      np.zeros((216, 216), np.float32), 1.0)  # one of its two step counts
    _script("sweep").main(argv)
    assert "4 to run in 1 trainings (3 steps in all) and 1 with" in capsys.readouterr().out
    for npy in cache.glob("*.npy"):  # damaged entries are trained again (run_group)
        npy.write_bytes(npy.read_bytes()[:100])
    _script("sweep").main(argv)
    assert "4 to run in 2 trainings (6 steps in all), --jobs 1" in capsys.readouterr().out


def test_table_smoke_on_orl(shared_data, tf1_ckpts, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MESC_DATA_DIR", str(shared_data))
    mod = _script("table")
    argv = ["--datasets", "orl", "--methods", "dsc_l1", "--seeds", "0,1", "--max-epochs", "2",
            "--tf1-checkpoint", f"orl={tf1_ckpts['orl']}", "--out", str(tmp_path)]
    mod.main(argv)
    table = json.loads((tmp_path / "main_table.json").read_text())
    cell = table["orl"]["dsc_l1"]
    assert cell["seeds"] == [0, 1] and len(cell["acc"]) == len(cell["nmi"]) == 2
    assert cell["settings"]["epochs"] == 2 and cell["max_epochs"] == 2 and cell["seconds"] > 0
    md = (tmp_path / "main_table.md").read_text()
    assert "SMOKE TEST" in md and "deterministic" in md and "cores" in md
    row = next(line for line in md.splitlines() if line.startswith("| orl | DSC-Net-L1"))
    median = 100 * float(np.median(cell["acc"]))
    assert f"{median:.2f}" in row and "| 85.75 |" in row and "| 90.23 |" in row  # paper's
    capsys.readouterr()
    # Rerun: the finished cell is kept, nothing is trained.
    mod.main(argv)
    assert "0 cells to run, 1 kept" in capsys.readouterr().out
    assert json.loads((tmp_path / "main_table.json").read_text()) == table
    # A cell another invocation writes while this one trains (say `make table DATASETS=usps`
    # running beside it) survives this one's writes.
    run = mod._run

    def run_beside_another(*a):
        for item in run(*a):
            other = {**table, "usps": {"dsc_l1": cell}}
            (tmp_path / "main_table.json").write_text(json.dumps(other))
            yield item

    monkeypatch.setattr(mod, "_run", run_beside_another)
    mod.main([*argv, "--force"])
    after = json.loads((tmp_path / "main_table.json").read_text())
    assert after["usps"] == {"dsc_l1": cell} and after["orl"]["dsc_l1"]["acc"] == cell["acc"]
    assert "| usps | DSC-Net-L1" in (tmp_path / "main_table.md").read_text()


def test_table_md_puts_paper_values_beside_measured():
    mod = _script("table")
    cell = {"acc": [0.91, 0.905, 0.90], "nmi": [0.94, 0.935, 0.93], "seeds": [0, 1, 2],
            "settings": {}, "seconds": 12.0, "steps": 127,
            "machine": {"cpu": "test cpu", "cores": 2}}
    md = mod.render_md({"orl": {"our": cell}}, "")
    row = next(line for line in md.splitlines() if line.startswith("| orl |"))
    assert row.split(" | ")[2:8] == ["90.50 ± 0.50", "90.50 ✓", "90.25", "93.50 ± 0.50",
                                     "93.50 ✗", "93.59"]
    assert "test cpu (2 cores)" in md and "SMOKE" not in md
    one = {**cell, "acc": [0.9], "nmi": [0.93], "seeds": [0]}  # one seed: no spread shown
    row = next(line for line in mod.render_md({"orl": {"our": one}}, "").splitlines()
               if line.startswith("| orl |"))
    assert row.split(" | ")[2] == "90.00"
    assert "except" not in md  # every cell from pretrained/<dataset>.h5
    tf1 = {**cell, "autoencoder": "TF1 checkpoint /elsewhere/EYaleB/model.ckpt"}
    md = mod.render_md({"orl": {"our": cell}, "eyaleb": {"our": tf1, "dsc_l1": tf1}}, "")
    assert md.count("except eyaleb (Our (MESC-Net), DSC-Net-L1): TF1 checkpoint "
                    "/elsewhere/EYaleB/model.ckpt.") == 1
    # A dataset whose cells came from two auto-encoders names the methods of each.
    md = mod.render_md({"eyaleb": {"our": tf1, "dsc_l1": cell}}, "")
    assert "except eyaleb (Our (MESC-Net)): TF1 checkpoint" in md


def test_table_bad_options_are_one_line():
    p = subprocess.run([sys.executable, str(REPO / "experiments" / "table.py"), "--datasets",
                        "orl,nope"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "MESC_DATA_DIR": "/nonexistent"})
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "unknown dataset 'nope'" in p.stderr


def test_table_smoke_run_needs_its_own_out():
    """--max-epochs cells are flagged, but would still replace the committed ones."""
    mod = _script("table")
    with pytest.raises(SystemExit) as e:
        mod.parse_args(["--datasets", "toy", "--max-epochs", "2"])
    assert e.value.code == 2
    assert mod.parse_args(["--datasets", "toy"]).out == REPO / "experiments" / "results"


def test_default_outputs_are_in_the_checkout_wherever_the_command_runs(synthetic_tf1, tmp_path,
                                                                     monkeypatch):
    monkeypatch.chdir(tmp_path)
    results = REPO / "experiments" / "results"
    assert _script("table").parse_args(["--datasets", "toy"]).out == results
    assert _script("sweep").parse_args(["--dataset", "toy"]).out == results / "sweeps" / "toy.jsonl"
    tf1_dir = synthetic_tf1["coil20"].parents[2]
    assert (_script("compare_autoencoders").parse_args(["--datasets", "toy", "--tf1-dir",
                                                        str(tf1_dir)]).out
            == results / "autoencoders")


def test_table_sweep_and_compare_ae_take_the_seed_forms_of_the_figure_scripts(synthetic_tf1):
    tf1 = ["--tf1-dir", str(synthetic_tf1["coil20"].parents[2])]
    for name, argv, default in (("table", [], [0, 1, 2, 3, 4]), ("sweep", [], [0]),
                                ("compare_autoencoders", tf1, [0, 1, 2, 3, 4])):
        mod, flag = _script(name), "--dataset" if name == "sweep" else "--datasets"
        assert mod.parse_args([flag, "toy", *argv]).seeds == default
        assert mod.parse_args([flag, "toy", *argv, "--seeds", "0", "4-5", "1,0"]).seeds == [0, 4,
                                                                                            5, 1]


@pytest.mark.parametrize("argv, needle", [(["--datasets", ","], "no dataset in ','"),
                                          (["--methods", " , "], "no method in"),
                                          (["--weights", "toy="], "no path after '='"),
                                          (["--weights", "toy.h5"], "give DATASET=PATH"),
                                          (["--weights", "toy=a.h5", "--weights", "TOY=b.h5"],
                                           "--weights is given twice for toy")])
def test_table_refuses_empty_lists_and_paths(argv, needle, capsys):
    with pytest.raises(SystemExit) as e:
        _script("table").parse_args(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and needle in err and err.count("\n") == 1, err


def test_table_and_compare_ae_check_their_counts(capsys):
    table, compare = _script("table"), _script("compare_autoencoders")
    for mod, argv, needle in [
        (table, ["--threads-per-job", "0"], "--threads-per-job: must be >= 1, got 0"),
        (compare, ["--max-epochs", "0", "--out", "/tmp/x"], "--max-epochs: must be >= 1, got 0"),
        (compare, ["--max-epochs", "2"], "needs --out DIR"),
    ]:
        with pytest.raises(SystemExit) as e:
            mod.parse_args(["--datasets", "toy", *argv])
        assert e.value.code == 2 and needle in capsys.readouterr().err


def test_a_smoke_cell_is_not_kept_for_a_full_run(toy_weights):
    """A --max-epochs cell whose cap lowered the steps does not stand in for a full run; a cap
    that did not bite (above the method's steps) is no cap (smoke_cap): that cell is a full
    run's, same settings and steps, and is stored, kept and shown as one."""
    table = _script("table")
    ae = sources.resolve_autoencoder("toy", weights=str(toy_weights))
    s = table.cell_settings("toy", "our", 10**6)
    assert s == table.cell_settings("toy", "our")  # the cap did not bite
    assert table.smoke_cap("toy", "our", 10**6) is None
    assert table.smoke_cap("toy", "our", None) is None
    assert table.smoke_cap("toy", "our", 2) == 2
    cell = {"settings": sweep.normalized(table.cell_settings("toy", "our", 2)),
            "seeds_requested": [0], "autoencoder_id": ae.ident, "max_epochs": 2}
    assert table.cell_is_current(cell, table.cell_settings("toy", "our", 2), [0], ae,
                                 max_epochs=2)
    assert not table.cell_is_current({**cell, "settings": sweep.normalized(s)}, s, [0], ae)
    assert table.cell_is_current({**cell, "settings": sweep.normalized(s), "max_epochs": None},
                                 s, [0], ae)


def test_a_cell_is_not_kept_for_other_data_files(toy_weights):
    """A cell records the data files it ran on (by SHA-256): it is kept for the same files, not
    for others; a cell from before data files were recorded (none) is kept."""
    table = _script("table")
    ae = sources.resolve_autoencoder("toy", weights=str(toy_weights))
    s = table.cell_settings("toy", "our")
    files = {"COIL20.mat": "a" * 64}
    cell = {"settings": sweep.normalized(s), "seeds_requested": [0], "autoencoder_id": ae.ident,
            "max_epochs": None, "data_files": files}
    assert table.cell_is_current(cell, s, [0], ae, None, files)
    assert not table.cell_is_current(cell, s, [0], ae, None, {"COIL20.mat": "b" * 64})
    assert table.cell_is_current({**cell, "data_files": None}, s, [0], ae, None, files)


def test_table_retry_failed_plans_only_the_cells_with_failed_seeds(synthetic_data, toy_weights,
                                                                    tmp_path, monkeypatch):
    """A seed that failed (ARPACK, a full memory) left its cell over fewer seeds until --force
    recomputed every cell; --retry-failed recomputes that cell alone."""
    monkeypatch.setenv("MESC_DATA_DIR", str(synthetic_data))
    table = _script("table")
    ae = sources.resolve_autoencoder("toy", weights=str(toy_weights))
    from mesc_tf.data import load_dataset

    files = load_dataset("toy").file_hashes
    cells = {m: {"settings": sweep.normalized(table.cell_settings("toy", m)),
                 "seeds_requested": [0, 1], "autoencoder_id": ae.ident, "max_epochs": None,
                 "data_files": files, "failed_seeds": {"1": "ARPACK"} if m == "our" else {}}
             for m in ("our", "dsc_l1")}
    argv = ["--datasets", "toy", "--methods", "our,dsc_l1", "--seeds", "0,1", "--weights",
            f"toy={toy_weights}", "--out", str(tmp_path)]
    for extra, planned in (([], []), (["--retry-failed"], ["our"])):
        args = table.parse_args([*argv, *extra])
        cont = table.common.Continuation(tmp_path, args.force, {})
        todo, kept, _ = table._plan(args, {"toy": cells}, None, cont)
        assert [m for _, m, *_ in todo] == planned and kept == 2 - len(planned)


def test_an_interrupted_table_force_goes_on_with_the_same_command(synthetic_data, toy_weights,
                                                                   tmp_path, capsys, monkeypatch):
    """Ctrl-C during `table.py --force` says "rerun the same command": that rerun keeps the
    cells the forced run finished and recomputes only the others (it recomputed all of them);
    once it completes, --force recomputes every cell again. Another request on the folder (other
    methods, side by side or in between) neither continues nor ends it, nor does another commit
    of the code continue it."""
    from mesc_tf import provenance

    monkeypatch.setenv("MESC_DATA_DIR", str(synthetic_data))
    mod = _script("table")
    ran, stop_after = [], [None]

    def run(todo, args, data_dir):
        for cell in todo:
            if len(ran) == stop_after[0]:
                raise KeyboardInterrupt
            ran.append(cell[1])
            yield _result(args.seeds, tag=cell[1]), cell

    monkeypatch.setattr(mod, "_run", run)
    out = tmp_path / "t"
    base = ["--datasets", "toy", "--seeds", "0", "--weights", f"toy={toy_weights}", "--out",
            str(out)]
    argv = [*base, "--methods", "our,dsc_l1,dsc_l2"]

    def markers():
        return sorted(out.glob(".recomputing-*.json"))

    mod.main(argv)
    assert ran == ["our", "dsc_l1", "dsc_l2"] and not markers()
    ran.clear()
    stop_after[0] = 1
    with pytest.raises(KeyboardInterrupt):
        mod.main([*argv, "--force"])
    (marker,) = markers()
    assert ran == ["our"]
    ran.clear()
    stop_after[0] = None
    capsys.readouterr()
    mod.main([*base, "--methods", "our", "--force"])  # another request: all its cells again
    assert ran == ["our"] and "continuing" not in capsys.readouterr().out
    assert markers() == [marker]
    ran.clear()
    mod.main([*argv, "--force"])
    printed = capsys.readouterr().out
    assert ran == ["dsc_l1", "dsc_l2"] and "2 cells to run, 1 kept" in printed
    assert f"what it finished is kept (1 cell(s); delete {marker} to recompute" in printed
    assert not markers()
    ran.clear()
    mod.main([*argv, "--force"])
    assert ran == ["our", "dsc_l1", "dsc_l2"]
    # Interrupted at one commit, rerun at another: every cell again.
    ran.clear()
    stop_after[0] = 1
    with pytest.raises(KeyboardInterrupt):
        mod.main([*argv, "--force"])
    monkeypatch.setattr(provenance, "code_revision", lambda: "0123456789ab")
    ran.clear()
    stop_after[0] = None
    mod.main([*argv, "--force"])
    assert ran == ["our", "dsc_l1", "dsc_l2"] and not markers()


def test_table_refuses_force_with_retry_failed(capsys):
    with pytest.raises(SystemExit):
        _script("table").parse_args(["--force", "--retry-failed"])
    assert "--force recomputes every cell and --retry-failed only" in capsys.readouterr().err


def test_table_flags_only_the_cells_max_epochs_capped(synthetic_data, toy_weights, tmp_path,
                                                       capsys, monkeypatch):
    """--max-epochs 50 caps Toy's 'our' (100 steps) but not dsc_l1 (30): only the first is a
    SMOKE TEST in main_table.md and .json (every cell was flagged); a rerun keeps both."""
    monkeypatch.setenv("MESC_DATA_DIR", str(synthetic_data))
    mod = _script("table")
    monkeypatch.setattr(mod, "_run", lambda todo, args, data_dir: (
        (_result(args.seeds, tag=cell[1]), cell) for cell in todo))
    out = tmp_path / "t"
    argv = ["--datasets", "toy", "--methods", "our,dsc_l1", "--seeds", "0", "--weights",
            f"toy={toy_weights}", "--max-epochs", "50", "--out", str(out)]
    cells = mod.main(argv)["toy"]
    assert cells["our"]["max_epochs"] == 50 and cells["our"]["settings"]["epochs"] == 50
    assert cells["dsc_l1"]["max_epochs"] is None and cells["dsc_l1"]["settings"]["epochs"] == 30
    md = (out / "main_table.md").read_text()
    assert "fine-tuning was capped with --max-epochs in toy/our;" in md
    assert "(smoke)" in next(line for line in md.splitlines() if "Our (MESC-Net)" in line)
    assert "(smoke)" not in next(line for line in md.splitlines() if "DSC-Net-L1" in line)
    capsys.readouterr()
    mod.main(argv)
    assert "0 cells to run, 2 kept" in capsys.readouterr().out


@pytest.mark.parametrize("argv, needle", [
    (["--datasets", "toy", "--weights", "orl=F"],
     "note: --weights orl=F is not used: --datasets does not include orl\n"),
    (["--tf1-checkpoint", "toy=original"],
     "note: --tf1-checkpoint toy=original is not used: the default --datasets does not include "
     "toy\n")])
def test_table_says_an_auto_encoder_for_a_dataset_it_does_not_run_is_unused(argv, needle,
                                                                            capsys):
    """It was silently unused. A note, not an error: `make table DATASETS=coil20` passes the
    authors' ORL checkpoint all the same."""
    _script("table").parse_args(argv)
    assert capsys.readouterr().out == needle


def test_table_that_fails_before_its_first_cell_leaves_no_folder(synthetic_data, toy_weights,
                                                                 tmp_path, monkeypatch):
    monkeypatch.setenv("MESC_DATA_DIR", str(synthetic_data))
    monkeypatch.setenv("MESC_MEMORY_LIMIT_BYTES", "1000")  # sweep.memory_check refuses
    with pytest.raises(MescError, match=r"need about .*MiB but 1000 bytes is available "
                       r"\(the cap MESC_MEMORY_LIMIT_BYTES sets\)"):
        _script("table").main(["--datasets", "toy", "--methods", "our", "--seeds", "0",
                               "--weights", f"toy={toy_weights}", "--max-epochs", "2",
                               "--out", str(tmp_path / "t")])
    assert not (tmp_path / "t").exists()


def test_table_with_missing_data_creates_no_folder(tmp_path):
    table = _script("table")
    (tmp_path / "data").mkdir()
    with pytest.raises(MescError, match=r"^eyaleb: eyaleb data file not found: looked for "
                                        r".*YaleBCrop025\.mat"):
        table.main(["--datasets", "eyaleb", "--data-dir", str(tmp_path / "data"), "--out",
                    str(tmp_path / "t")])
    assert not (tmp_path / "t").exists()


def test_table_that_can_run_nothing_leaves_its_table_alone(tmp_path):
    """Without --datasets every dataset without data is skipped; where all of them are, the
    table's record of its last invocation was rewritten as "0 cells run" (exit 0)."""
    table = _script("table")
    (tmp_path / "data").mkdir()
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "main_table.md").write_text("the last table\n")
    with pytest.raises(MescError, match=r"no dataset could be run, all 7 skipped \(the first: "
                       "orl .*set --data-dir or MESC_DATA_DIR"):
        table.main(["--data-dir", str(tmp_path / "data"), "--out", str(tmp_path / "t")])
    assert [p.name for p in (tmp_path / "t").iterdir()] == ["main_table.md"]
    assert (tmp_path / "t" / "main_table.md").read_text() == "the last table\n"


def test_table_checks_every_auto_encoder_before_its_first_cell(synthetic_data, toy_weights,
                                                               tmp_path, monkeypatch):
    """A file of another architecture for the second dataset was found after the first
    dataset's cells had run; a missing default file named options table.py does not have."""
    monkeypatch.setenv("MESC_DATA_DIR", str(synthetic_data))
    table = _script("table")
    with pytest.raises(MescError, match=r"^orl: .*holds an auto-encoder for .*image_shape"):
        table.main(["--datasets", "toy", "orl", "--methods", "our", "--seeds", "0",
                    "--weights", f"toy={toy_weights}", "--weights", f"orl={toy_weights}",
                    "--max-epochs", "2", "--out", str(tmp_path / "t")])
    monkeypatch.setenv("MESC_PRETRAINED_DIR", str(tmp_path / "none"))
    with pytest.raises(MescError, match="pass --weights toy=PATH or --tf1-checkpoint "
                       "toy=PREFIX$"):
        table.main(["--datasets", "toy", "--methods", "our", "--seeds", "0", "--max-epochs",
                    "2", "--out", str(tmp_path / "t")])
    assert not (tmp_path / "t").exists()


def _rec(reg1, seed, acc, nmi=None, error=None):
    return {"dataset": "toy", "autoencoder_id": "none", "seed": seed, "error": error,
            "settings": Settings(reg1=reg1).to_dict(), "timings": {},
            "metrics": None if error else {"acc": acc, "nmi": acc if nmi is None else nmi}}


def test_coef_cache_key_holds_every_training_field_and_the_step_count():
    """Two C's share a cache entry only when all that trained them is the same: each training
    field but epochs (a snapshot's step count stands for it), the step count, the initial seed
    and the thread count."""
    base = Settings()
    key = sweep.coef_cache_key("toy", "weights:" + "0" * 16, base, 10)
    changed = {"framework": "coupled", "regularizer": "l1", "reg1": base.reg1 * 2,
               "reg2": base.reg2 * 2, "lr": base.lr * 2, "coef_init": base.coef_init * 2,
               "recon_scale": base.recon_scale * 2}
    assert set(changed) == set(TRAIN_FIELDS) - {"epochs"}
    for field, value in changed.items():
        assert sweep.coef_cache_key("toy", "weights:" + "0" * 16, base.replace(**{field: value}),
                                    10) != key, field
    others = [sweep.coef_cache_key("toy", "weights:" + "0" * 16, base, 20),
              sweep.coef_cache_key("toy", "weights:" + "0" * 16, base, 10, init_seed=1),
              sweep.coef_cache_key("toy", "weights:" + "0" * 16, base, 10, threads=1),
              sweep.coef_cache_key("orl", "weights:" + "0" * 16, base, 10),
              sweep.coef_cache_key("toy", "weights:" + "1" * 16, base, 10),
              sweep.coef_cache_key("toy", "weights:" + "0" * 16, base, 10,
                                   data_files={"COIL20.mat": "0" * 64})]
    assert len({key, *others}) == 7
    # epochs is not in it (the step count is), nor are the post-clustering fields.
    assert sweep.coef_cache_key("toy", "weights:" + "0" * 16, base.replace(epochs=99, thr=0.5),
                                10) == key
    # The libraries that run the step, and the package's code that does (the modules a C
    # depends on, not the post-clustering's).
    import keras

    fields = json.loads(key)
    assert fields["keras"] == keras.__version__ and fields["tensorflow"]
    assert fields["code"] == sweep._training_code()
    assert {"model.py", "losses.py", "training.py"} <= set(sweep._TRAINING_MODULES)


def test_trial_key_tells_seeds_apart_so_resume_runs_the_missing_ones():
    """A sweep resumed with more seeds runs only the seeds not yet in the file."""
    s = Settings()
    ae = sources.AutoencoderSpec("weights", "x.h5", "0" * 64)
    done = sweep.done_keys([{"dataset": "toy", "autoencoder_id": ae.ident, "seed": 0,
                             "settings": s.to_dict()}])
    groups, skipped = sweep.plan([s], [0, 1, 2], ae, "toy", done)
    assert skipped == 1 and [t.seed for g in groups for t in g.trials] == [1, 2]


def test_retry_errors_reruns_only_the_failed_trials():
    """done_keys(retry_errors=True) leaves failed trials out of the done set (so --retry-errors
    runs them again); by default they count as done."""
    ok, failed = _rec(1.0, 0, 0.5), _rec(1.0, 1, None, error="ArpackError: no convergence")
    assert sweep.done_keys([ok, failed]) == {sweep.record_key(ok), sweep.record_key(failed)}
    assert sweep.done_keys([ok, failed], retry_errors=True) == {sweep.record_key(ok)}


@pytest.mark.parametrize("line, problem", [
    ({"step": 1, "loss": 0.5}, "no dataset, autoencoder_id, seed, settings, metrics, error, "
                               "timings"),
    ({k: v for k, v in _rec(1.0, 1, 0.5).items() if k != "timings"}, "no timings"),
    ({**_rec(1.0, 1, 0.5), "metrics": {"acc": "0.5", "nmi": 0.5}}, "metrics.acc is not a number"),
    ({**_rec(1.0, 1, 0.5), "settings": {k: v for k, v in Settings().to_dict().items()
                                        if k != "thr"}}, "settings has no thr"),
    ({**_rec(1.0, 1, 0.5), "settings": {**Settings().to_dict(), "epochs": 2.5}},
     "settings.epochs is not a whole number"),
    ({**_rec(1.0, 1, 0.5), "seed": "1"}, "seed is not a whole number"),
    ({**_rec(1.0, 1, 0.5), "timings": None}, "timings is not an object"),
    ([1, 2], "not a JSON object")])
def test_json_lines_that_are_not_trial_records_are_refused(tmp_path, line, problem):
    """A line that parses as JSON but is not a record (keys missing, wrong types): one error
    naming the line, not a torn line skipped (the sweep would then append to someone else's
    file) nor a KeyError in the summary. Without any trial record the file is not a sweep's;
    beside records (an edit, a merge conflict's markers) it is that line to fix: the error said
    'not a file of sweep results ... pass another --out FILE' of a file of results too."""
    out = tmp_path / "s.jsonl"
    out.write_text(json.dumps(line) + "\n")
    with pytest.raises(MescError) as e:
        sweep.read_records(out)
    assert str(e.value).startswith(f"{out} is not a file of sweep results (line 1: {problem}")
    assert str(e.value).endswith("; pass another --out FILE") and "\n" not in str(e.value)
    out.unlink()
    for rec in (_rec(1.0, 0, 0.5), line, _rec(1.0, 1, 0.5)):
        sweep.append_jsonl(out, rec)
    with pytest.raises(MescError) as e:
        sweep.read_records(out)
    assert str(e.value).startswith(f"{out}, line 2: not a trial record ({problem}")
    assert str(e.value).endswith("); fix or delete that line, or pass another --out FILE")


def test_sweep_refuses_a_file_of_other_json_lines_and_leaves_it_alone(tmp_path):
    out = tmp_path / "f.jsonl"
    out.write_text('{"step": 1, "loss": 0.5}\n')
    proc = subprocess.run([sys.executable, str(REPO / "experiments" / "sweep.py"), "--dataset",
                           "toy", "--grid", "epochs=2", "--jobs", "1", "--out", str(out)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == (f"error: {out} is not a file of sweep results (line 1: no dataset, "
                           "autoencoder_id, seed, settings, metrics, error, timings); pass "
                           "another --out FILE\n")
    assert out.read_text() == '{"step": 1, "loss": 0.5}\n'


def test_summary_std_is_the_sample_std():
    """ACC/NMI spread over seeds is the sample std (ddof 1), as the tables show it."""
    st = sweep.stats([0.8, 0.9])
    assert st["std"] == pytest.approx(0.1 / 2 ** 0.5) and st["median"] == pytest.approx(0.85)
    assert sweep.stats([0.7])["std"] is None  # one seed has no spread (was 0, shown "± 0.00")


def test_summary_ties_on_median_acc_go_to_median_nmi_before_mean_acc():
    """Equal median ACC: median NMI decides, before mean ACC (the documented order)."""
    records = [_rec(1.0, 0, 0.5, 0.9), _rec(1.0, 1, 0.5, 0.9), _rec(1.0, 2, 0.2, 0.9),
               _rec(2.0, 0, 0.5, 0.1), _rec(2.0, 1, 0.5, 0.1), _rec(2.0, 2, 0.9, 0.1)]
    assert [r["settings"]["reg1"] for r in sweep.summarize(records)] == [1.0, 2.0]


def test_summary_keeps_only_the_given_keys_and_top_rows():
    """summarize(keys=...) ranks only those trials (the current grid in --summary-only) and
    format_summary shows the best ``top`` rows (--top)."""
    records = [_rec(r, s, 0.1 * r) for r in (1.0, 2.0, 3.0) for s in (0, 1)]
    keys = {sweep.record_key(r) for r in records if r["settings"]["reg1"] != 3.0}
    rows = sweep.summarize(records, keys)
    assert [r["settings"]["reg1"] for r in rows] == [2.0, 1.0]
    text = sweep.format_summary(sweep.summarize(records), top=2)
    assert len(text.splitlines()) == 3  # the header and two rows


def test_a_row_over_fewer_seeds_than_asked_says_so(toy_weights, tmp_path, capsys):
    """The seeds column reads '1 of 3' where one of three seeds asked for finished (an
    interrupted sweep, a failed trial), not a bare 1 beside the rows over all three."""
    ident = sources.resolve_autoencoder("toy", weights=str(toy_weights)).ident
    out = tmp_path / "toy.jsonl"
    for reg1, seeds in ((1.0, (0, 1, 2)), (2.0, (0,))):
        for seed in seeds:
            sweep.append_jsonl(out, {**_rec(reg1, seed, 0.5), "autoencoder_id": ident})
    _script("sweep").main(["--dataset", "toy", "--summary-only", "--weights", str(toy_weights),
                           "--seeds", "0-2", "--out", str(out)])
    rows = capsys.readouterr().out.splitlines()[-2:]
    assert rows[0].split()[:2] == ["1", "1"] and rows[0].split()[-2:] == ["3", "0"]
    assert rows[1].split()[:2] == ["2", "2"] and rows[1].endswith("  1 of 3       0")
    assert sweep.format_summary(sweep.summarize([_rec(2.0, 0, 0.5)])).split()[-2:] == ["1", "0"]


def test_a_one_row_summary_says_which_setting_it_is():
    """With one row no field varies, and the table showed no setting at all: now the grid's
    fields are its columns, and without a grid every setting is listed above it."""
    rows = sweep.summarize([_rec(2.0, 0, 0.5)])
    head, row = sweep.format_summary(rows, grid={"reg1": [2.0], "epochs": [5]}).splitlines()
    assert head.split()[:3] == ["rank", "reg1", "epochs"] and row.split()[:2] == ["1", "2"]
    above, head, row = sweep.format_summary(rows).splitlines()
    assert above.startswith("settings: framework=decoupled regularizer=entropy reg1=2 ")
    assert head.split()[:3] == ["rank", "ACC", "median"]
    several = sweep.summarize([_rec(1.0, 0, 0.5), _rec(2.0, 0, 0.5)])  # reg1 varies: as before
    assert sweep.format_summary(several, grid={"epochs": [5]}).splitlines()[0].split()[:2] == [
        "rank", "reg1"]


# --- table.py and sweep.py without training (mutation-testing gaps) ------------------------------


def test_table_names_are_case_blind_and_counted_once():
    """--datasets ORL,orl and --methods OUR our name one cell each, not two."""
    args = _script("table").parse_args(["--datasets", "ORL,orl", "coil20", "--methods", "OUR",
                                        "our"])
    assert args.datasets == ["orl", "coil20"] and args.methods == ["our"]


def test_table_gives_one_thread_per_job_only_with_several_jobs():
    """--jobs 1 keeps TF's and BLAS's own thread counts (as the committed cells ran)."""
    table = _script("table")
    assert table.parse_args(["--datasets", "toy"]).threads_per_job is None
    assert table.parse_args(["--datasets", "toy", "--jobs", "2"]).threads_per_job == 1
    assert table.parse_args(["--datasets", "toy", "--jobs", "2", "--threads-per-job",
                             "3"]).threads_per_job == 3


def test_table_refuses_weights_and_tf1_checkpoint_for_one_dataset(capsys):
    with pytest.raises(SystemExit) as e:
        _script("table").parse_args(["--weights", "orl=a.h5", "--tf1-checkpoint", "orl=original"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "not both" in err and err.count("\n") == 1, err


def test_table_refuses_a_results_file_that_is_not_an_object(tmp_path):
    path = tmp_path / "main_table.json"
    path.write_text("[]")
    with pytest.raises(MescError, match=r"cannot read .*main_table.json \(not a JSON object\)"):
        _script("table").load_table(path)


@pytest.mark.parametrize("content, problem", [
    ({"toy": []}, "toy: not a JSON object"), ({"toy": {"our": 5}}, "toy/our: not a JSON object"),
    ({"toy": {"our": {"acc": ["x"]}}}, "toy/our: acc is not a list of numbers"),
    ({"toy": {"our": {"machine": "cpu"}}}, "toy/our: machine is not an object")])
def test_table_refuses_a_malformed_table_before_any_training(tmp_path, capsys, monkeypatch,
                                                             content, problem):
    """A main_table.json of the wrong shape is one line naming the file and the cell, before
    any cell runs (it used to be an AttributeError, some after training a cell); the file is
    left as it was."""
    mod = _script("table")
    monkeypatch.setattr(mod, "_run", lambda *a: pytest.fail("a cell ran"))
    path = tmp_path / "main_table.json"
    path.write_text(json.dumps(content))
    with pytest.raises(SystemExit) as e:
        mod.cli.main_guard(lambda: mod.main(["--datasets", "toy", "--methods", "our", "--out",
                                             str(tmp_path)]))
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: cannot use {path} ({problem}")
    assert json.loads(path.read_text()) == content
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "main_table.json").mkdir()
    with pytest.raises(MescError, match=r"main_table.json is a folder, not a table file; move "
                       "it away or pass another --out DIR"):
        mod.main(["--datasets", "toy", "--methods", "our", "--out", str(tmp_path / "other")])


def _result(seeds, failed=(), tag="our"):
    """A sweep.run_groups result, as a table cell's group gives it, without training."""
    metrics = {"acc": 0.5, "nmi": 0.6, "pur": 0.7, "ari": 0.4, "nmi_max": 0.65}  # all differ
    recs = [{"seed": s, "n_samples": 216, "timings": {"post_s": 0.1},
             "metrics": None if s in failed else {k: v + s / 100 for k, v in metrics.items()},
             "error": "ArpackError: no convergence" if s in failed else None} for s in seeds]
    return {"records": recs, "seconds": 2.0, "train_s": 1.0, "steps_run": 4, "tag": tag}


def test_table_cell_leaves_a_failed_seed_out_of_the_scores_and_stays_current():
    """A seed whose clustering failed is listed with its error, out of acc/nmi/seeds; the cell
    still answers the same request (all seeds requested), so a rerun keeps it."""
    from types import SimpleNamespace

    table = _script("table")
    ae = sources.AutoencoderSpec("weights", "x.h5", "0" * 64)
    s = method_settings("toy", "our")
    res = _result([2, 0, 1], failed=(1,))  # in the order the records came, not the seeds'
    args = SimpleNamespace(max_epochs=None, jobs=1, threads_per_job=None)
    cell = table.make_cell(res, ae, s, [0, 1, 2], args)
    assert cell["seeds"] == [0, 2] and cell["acc"] == [0.5, 0.52] and cell["nmi"] == [0.6, 0.62]
    # Each column holds its own metric (the NMI column is a published figure, not nmi_max).
    for key, want in (("nmi_max", [0.65, 0.67]), ("pur", [0.7, 0.72]), ("ari", [0.4, 0.42])):
        assert cell[key] == pytest.approx(want, abs=1e-12), key
    assert cell["failed_seeds"] == {"1": "ArpackError: no convergence"}
    assert cell["seeds_requested"] == [0, 1, 2] and len(cell["post_s"]) == 3
    assert table.cell_is_current(cell, s, [0, 1, 2], ae)


def test_a_sweep_record_is_its_own_trials_and_holds_the_papers_nmi(monkeypatch):
    """A trial clusters its own step count's C with its own seed (every table cell's seeds go
    through here), and records its own steps and time. nmi_max is NMI normalised by the larger
    entropy (the paper's), not the arithmetic mean (nmi) nor another: labels whose two entropies
    differ tell them apart."""
    from types import SimpleNamespace

    from mesc_tf import pipeline
    from mesc_tf.metrics import nmi

    y = np.repeat([1, 2, 3], 4)
    labels = np.array([0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1])
    clustered = []
    monkeypatch.setattr(pipeline, "cluster", lambda coef, k, s, seed, info: (
        clustered.append((coef, seed)) or (labels, {})))
    s = method_settings("toy", "our").replace(epochs=2)
    trial = sweep.Trial(s, 5)
    coefs = {2: np.eye(12), 4: np.ones((12, 12))}  # one training's snapshots at steps 2 and 4
    trained = SimpleNamespace(snaps=SimpleNamespace(coefs=coefs, seconds={2: 0.3, 4: 0.9}),
                              steps_run=4, train_s=1.0, cache_use=None)
    group = SimpleNamespace(steps=[2, 4], trials=[trial], tag="our")
    ds = SimpleNamespace(x=np.zeros((12, 1)), y=y, n_clusters=3, file_hashes=None)
    ae = SimpleNamespace(describe=lambda: "ae", ident="ae")
    rec = sweep._scored_trial(trial, group, trained, ds, "toy", ae, None, None)
    # The trial's own snapshot and seed, and its own step count and training time.
    ((coef, seed),) = clustered
    assert coef is coefs[2] and seed == 5
    assert rec["seed"] == 5 and rec["timings"]["steps"] == 2
    assert rec["timings"]["train_s"] == 0.3 and rec["timings"]["train_run_s"] == 1.0
    assert rec["metrics"]["nmi_max"] == pytest.approx(nmi(y, labels, "max"), abs=1e-12)
    others = {m: nmi(y, labels, m) for m in ("arithmetic", "geometric", "min")}
    assert min(abs(rec["metrics"]["nmi_max"] - v) for v in others.values()) > 0.01, others
    assert rec["metrics"]["nmi"] == pytest.approx(others["arithmetic"], abs=1e-12)


def test_a_record_whose_settings_are_spelt_as_ints_counts_as_done():
    """A results file may hold reg1 1 for 1.0 (a hand-written or older line): resuming counts
    its trial as done instead of running it again."""
    ae = sources.AutoencoderSpec("weights", "x.h5", "0" * 64)
    s = method_settings("toy", "our").replace(reg1=1.0, epochs=2)
    rec = {"dataset": "toy", "autoencoder_id": ae.ident, "seed": 0,
           "settings": {**sweep.normalized(s), "reg1": 1}}
    assert isinstance(rec["settings"]["reg1"], int)
    groups, skipped = sweep.plan([s], [0], ae, "toy", sweep.done_keys([rec]))
    assert skipped == 1 and groups == []


def test_a_group_seeds_the_runtime_with_its_init_seed_before_building_the_autoencoder(
        monkeypatch):
    """--no-pretrain sweeps: seed S's group starts from seed S's he_normal draw (the C run.py
    --no-pretrain --seed S trains), not seed 0's."""
    from types import SimpleNamespace

    from mesc_tf import pipeline, training

    calls = []
    monkeypatch.setattr(training, "configure_runtime", lambda seed: calls.append(seed))
    ae = SimpleNamespace(ident="none", load=lambda arch: calls.append("load"))
    model = SimpleNamespace(optimizer=SimpleNamespace(iterations=SimpleNamespace(
        numpy=lambda: 2)))
    monkeypatch.setattr(pipeline, "fine_tune", lambda *a, **k: (calls.append("train") or model,
                                                                 {}, 0.1))
    s = method_settings("toy", "our").replace(epochs=2)
    group = sweep.Group(s, (sweep.Trial(s, 3),), init_seed=3)
    ds = SimpleNamespace(x=np.zeros((6, 32, 32, 1), np.float32), file_hashes=None)
    sweep._trained_coefs(group, ds, "toy", ae, None, 0, None, 0.0)
    assert calls == [3, "load", "train"]


def test_the_papers_values_are_reference_facts_tables(shared_dir):
    """main_table.md's "paper" columns and its ✓/✗ marks: every value of the paper's ACC and
    NMI tables (reference-facts §5.1, §5.2), each under its own dataset."""
    table = _script("table")
    text = (shared_dir / "docs" / "reference-facts.md").read_text()
    names = {"DSC-Net-L1": "dsc_l1", "DSC-Net-L2": "dsc_l2", "Our w/o Net": "our_wo_net",
             "Our": "our"}
    seen = 0
    for metric, section in (("acc", "### 5.1"), ("nmi", "### 5.2")):
        rows = text[text.index(section):].split("\n\n")[0].splitlines()
        header = [c.strip().lower() for c in rows[1].strip("|").split("|")][1:]
        assert tuple(header) == table.PAPER_DATASETS
        for row in rows[3:]:
            cells = [c.strip().replace("*", "") for c in row.strip("|").split("|")]
            method = names.get(re.sub(r" \(.*\)$", "", cells[0]))
            if method is None:
                continue
            for d, value in zip(header, cells[1:]):
                assert table.PAPER_REPORTED[d][method][metric] == float(value), (d, method)
                seen += 1
    assert seen == 56


def test_table_cell_is_recomputed_when_its_settings_or_seeds_change():
    """config.py's settings or the --seeds changed since the cell ran: it is stale."""
    table = _script("table")
    ae = sources.AutoencoderSpec("weights", "x.h5", "0" * 64)
    s = method_settings("toy", "our")
    cell = {"settings": sweep.normalized(s), "seeds_requested": [0, 1],
            "autoencoder_id": ae.ident, "max_epochs": None}
    assert table.cell_is_current(cell, s, [0, 1], ae)
    assert not table.cell_is_current(cell, s.replace(reg1=s.reg1 * 2), [0, 1], ae)
    assert not table.cell_is_current(cell, s, [0, 1, 2], ae)
    assert not table.cell_is_current(cell, s, [0], ae)


def test_table_cell_answers_its_seeds_in_any_order():
    """Each seed's clustering depends on that seed alone (one fine-tuning; trials run sorted),
    so --seeds 1,0 is answered by the cell of --seeds 0,1: kept, as it is, not recomputed."""
    table = _script("table")
    ae = sources.AutoencoderSpec("weights", "x.h5", "0" * 64)
    s = method_settings("toy", "our")
    cell = {"settings": sweep.normalized(s), "seeds_requested": [0, 1, 2],
            "autoencoder_id": ae.ident, "max_epochs": None}
    assert table.cell_is_current(cell, s, [2, 1, 0], ae)
    assert table.cell_is_current(cell, s, [1, 0, 2], ae)


def test_table_md_median_tick_total_time_and_failed_seeds():
    """The median (not the mean) is the headline and is ticked when, rounded as shown, it
    equals the paper's value; the total time is the sum of the cells'; failed seeds show."""
    mod = _script("table")
    cell = {"acc": [0.70, 0.902499999, 0.91], "nmi": [0.5, 0.9, 0.99], "seeds": [0, 2, 3],
            "failed_seeds": {"1": "ArpackError"}, "settings": {}, "seconds": 12.0, "steps": 127}
    md = mod.render_md({"orl": {"our": cell, "dsc_l1": {**cell, "seconds": 30.0}}}, "")
    row = next(line for line in md.splitlines() if line.startswith("| orl | Our (MESC-Net)"))
    assert row.split(" | ")[2:5] == ["83.75 ± 11.91", "90.25 ✓", "90.25"]  # paper: 90.25
    assert row.split(" | ")[6] == "90.00 ✗"
    assert row.split(" | ")[8] == "0,2,3 (1 failed)"
    assert "Total time of the 2 cells: 42 s" in md


def test_table_skips_default_datasets_without_data_and_says_so(synthetic_data, capsys,
                                                                tmp_path, monkeypatch):
    """Without --datasets, a paper dataset whose data is missing is skipped (named in the
    output and in main_table.md), not an error, while others can run; Toy is not a paper
    dataset. (Where none can run: test_table_that_can_run_nothing_leaves_its_table_alone.)"""
    mod = _script("table")
    planned = []
    monkeypatch.setattr(mod, "_run", lambda todo, args, data_dir: planned.extend(todo) or [])
    out = tmp_path / "t"
    table = mod.main(["--data-dir", str(synthetic_data), "--out", str(out)])
    printed = capsys.readouterr().out
    assert table == {} and {cell[0] for cell in planned} == {"orl", "coil20"}
    assert "skipped eyaleb (" in printed and "skipped mnist (" in printed
    assert "skipped orl" not in printed and "skipped toy" not in printed
    assert "Skipped (no data or auto-encoder): coil40 (" in (out / "main_table.md").read_text()


def test_table_merges_every_method_it_runs_and_honours_force(synthetic_data, toy_weights,
                                                            tmp_path, capsys, monkeypatch):
    """Cells of several methods of one dataset all reach main_table.json, beside the cells
    already there; the returned table has them; a rerun keeps them, --force reruns them."""
    monkeypatch.setenv("MESC_DATA_DIR", str(synthetic_data))
    mod = _script("table")
    ran = []

    def fake_run(todo, args, data_dir):
        for cell in todo:
            ran.append(cell[:2])
            yield _result(args.seeds, tag=cell[1]), cell

    monkeypatch.setattr(mod, "_run", fake_run)
    out = tmp_path / "t"
    out.mkdir()
    (out / "main_table.json").write_text(json.dumps({"toy": {"dsc_l2": {"acc": [0.1]}}}))
    argv = ["--datasets", "toy", "--methods", "our,dsc_l1", "--seeds", "0,1", "--weights",
            f"toy={toy_weights}", "--out", str(out)]
    returned = mod.main(argv)
    written = json.loads((out / "main_table.json").read_text())
    assert sorted(written["toy"]) == ["dsc_l1", "dsc_l2", "our"]
    assert returned["toy"]["our"] == written["toy"]["our"] and "dsc_l1" in returned["toy"]
    assert written["toy"]["our"]["acc"] == [0.5, 0.51]
    md = (out / "main_table.md").read_text()
    assert "| toy | Our (MESC-Net) |" in md and "| toy | DSC-Net-L1 |" in md
    capsys.readouterr()
    mod.main(argv)
    assert "0 cells to run, 2 kept" in capsys.readouterr().out and len(ran) == 2
    mod.main([*argv, "--force"])
    assert "2 cells to run, 0 kept" in capsys.readouterr().out and len(ran) == 4


def test_sweep_defaults_jobs_top_and_threads():
    """Two jobs (one on a 1-core machine), each with one thread; --jobs 1 keeps TF's own
    threads; the summary shows 10 rows."""
    script = _script("sweep")
    args = script.parse_args(["--dataset", "toy"])
    assert args.jobs == min(2, os.cpu_count() or 1) and args.top == 10
    assert args.threads_per_job == (1 if args.jobs > 1 else None)
    assert script.parse_args(["--dataset", "toy", "--jobs", "1"]).threads_per_job is None


def _toy_rec(ident, seed, acc, dataset="toy", error=None, **changes):
    s = method_settings("toy", "our").replace(**changes)
    return {"dataset": dataset, "autoencoder_id": ident, "seed": seed, "error": error,
            "settings": s.to_dict(), "timings": {},
            "metrics": None if error else {"acc": acc, "nmi": acc}}


def test_summary_only_keeps_the_dataset_and_the_grid(tmp_path, capsys):
    """--summary-only ranks the trials of --dataset alone (a --no-pretrain file may hold
    others: their auto-encoder ident is the same 'none'), and of --grid when it is given."""
    out = tmp_path / "s.jsonl"
    for rec in (_toy_rec("none", 0, 0.5, reg1=1.0), _toy_rec("none", 0, 0.6, reg1=2.0),
                _toy_rec("none", 0, 0.9, dataset="orl", reg1=3.0)):
        sweep.append_jsonl(out, rec)
    script = _script("sweep")
    argv = ["--dataset", "toy", "--summary-only", "--no-pretrain", "--out", str(out)]
    script.main(argv)
    printed = capsys.readouterr().out
    assert printed.startswith("2 of the file's records") and "90.00" not in printed
    assert "50.00" in printed and "60.00" in printed
    script.main([*argv, "--grid", "reg1=1"])
    printed = capsys.readouterr().out
    assert "50.00" in printed and "60.00" not in printed


def test_summary_only_covers_every_recorded_seed_unless_seeds_are_given(tmp_path, capsys):
    """--summary-only with --grid used the default seed 0 alone, however many seeds the file
    held; without --grid, --seeds and --method were ignored. Now: every seed recorded unless
    --seeds, --seeds (and an explicit --method) with or without --grid, and the header line
    says which seeds the summary covers."""
    out = tmp_path / "s.jsonl"
    for seed in range(3):
        for reg1, method in ((1.0, "our"), (2.0, "dsc_l1")):
            sweep.append_jsonl(out, {**_toy_rec("none", seed, 0.5 + seed / 10, reg1=reg1),
                                     "method": method})
    script = _script("sweep")
    argv = ["--dataset", "toy", "--summary-only", "--no-pretrain", "--out", str(out)]

    def summary(*extra):
        script.main([*argv, *extra])
        head, *table = capsys.readouterr().out.splitlines()
        rows = [line for line in table if line.split()[0].isdigit()]
        return head, [line.split()[-2] for line in rows]  # each row's count of seeds

    assert summary("--grid", "reg1=1") == (
        "6 of the file's records come from he_normal initialisation (no pretraining); the "
        "summary covers seeds 0-2 (every seed recorded)", ["3"])
    assert summary("--grid", "reg1=1,2", "--seeds", "0,2") == (
        "6 of the file's records come from he_normal initialisation (no pretraining); the "
        "summary covers seeds 0,2", ["2", "2"])
    assert summary("--seeds", "1")[1] == ["1", "1"]
    assert summary("--method", "dsc_l1")[1] == ["3"]
    assert summary()[1] == ["3", "3"]
    script.main([*argv, "--grid", "reg1=1"])  # one row: the grid's field still shown
    assert capsys.readouterr().out.splitlines()[1].split()[:2] == ["rank", "reg1"]
    assert sweep.seeds_text([5, 0, 2, 1]) == "0-2,5" and sweep.seeds_text([]) == "none"


def test_sweep_names_the_torn_lines_it_skips(tmp_path, capsys):
    """The note says which lines were torn and what becomes of their trials (it said 'it
    will be rerun' even after the rerun)."""
    out = tmp_path / "s.jsonl"
    sweep.append_jsonl(out, _toy_rec("none", 0, 0.5))
    with open(out, "a") as f:
        f.write('{"dataset": "toy", "autoenc')
    sweep.append_jsonl(out, _toy_rec("none", 1, 0.5))
    _script("sweep").main(["--dataset", "toy", "--summary-only", "--no-pretrain", "--out",
                           str(out)])
    assert capsys.readouterr().out.startswith(
        f"note: {out}: line 2 unreadable (torn by a kill), skipped; a trial missing from the "
        "file is run again\n")


@pytest.mark.parametrize("mode", ["--dry-run", "--summary-only"])
def test_sweep_checks_the_autoencoders_architecture_before_any_plan(tmp_path, monkeypatch,
                                                                    capsys, mode):
    """An auto-encoder made for another dataset is refused before the plan is printed (it was
    found only when a worker loaded it, after TensorFlow started; a --dry-run looked fine)."""
    out = tmp_path / "s.jsonl"
    sweep.append_jsonl(out, _toy_rec("none", 0, 0.5))
    monkeypatch.setattr(sweep, "plan", lambda *a, **k: pytest.fail("planned"))
    with pytest.raises(MescError, match=r"orl.h5 holds an auto-encoder for .* but this dataset "
                       "needs .*; give an auto-encoder made for this dataset"):
        _script("sweep").main(["--dataset", "toy", "--weights", str(REPO / "pretrained" /
                                                                    "orl.h5"), "--out", str(out),
                               mode])
    assert capsys.readouterr().out == ""


def test_sweep_retry_errors_plans_the_failed_trials_again(synthetic_data, toy_weights, tmp_path,
                                                          capsys, monkeypatch):
    """--dry-run counts what a rerun would skip: a failed trial counts as done, unless
    --retry-errors."""
    monkeypatch.setenv("MESC_DATA_DIR", str(synthetic_data))
    ident = sources.resolve_autoencoder("toy", weights=str(toy_weights)).ident
    out = tmp_path / "s.jsonl"
    sweep.append_jsonl(out, _toy_rec(ident, 0, 0.5))
    sweep.append_jsonl(out, _toy_rec(ident, 1, None, error="ArpackError"))
    argv = ["--dataset", "toy", "--weights", str(toy_weights), "--seeds", "0,1", "--out",
            str(out), "--dry-run"]
    script = _script("sweep")
    script.main(argv)
    assert "2 already in" in capsys.readouterr().out
    script.main([*argv, "--retry-errors"])
    assert "1 already in" in capsys.readouterr().out and len(sweep.read_records(out)[0]) == 2


def test_sweep_memory_check_counts_jobs_and_snapshots(synthetic_data, toy_weights, tmp_path,
                                                      monkeypatch):
    """The memory check before training: as many workers as groups can use (at most --jobs),
    each holding a C per snapshot of its step sweep; where every group reads its C's from the
    --coef-cache, a clustering's need instead of a training's."""
    monkeypatch.setenv("MESC_DATA_DIR", str(synthetic_data))
    calls = []
    real_check = sweep.memory_check

    def check(dataset, n_jobs, n_snapshots, trains=True):
        calls.append((dataset, n_jobs, n_snapshots, trains))
        raise MescError("stop here")

    monkeypatch.setattr(sweep, "memory_check", check)
    argv = ["--dataset", "toy", "--weights", str(toy_weights), "--grid", "epochs=2,4 reg1=1,2",
            "--out", str(tmp_path / "s.jsonl")]
    for jobs, n_jobs in (("1", 1), ("3", 2)):
        with pytest.raises(MescError, match="stop here"):
            _script("sweep").main([*argv, "--jobs", jobs])
        assert calls.pop() == ("toy", n_jobs, 2, True)
    monkeypatch.setattr(sweep, "group_in_cache", lambda *args: True)
    with pytest.raises(MescError, match="stop here"):
        _script("sweep").main([*argv, "--jobs", "3", "--coef-cache", str(tmp_path / "c")])
    assert calls.pop() == ("toy", 2, 2, False)
    # A limit between the two needs: clustering fits, training does not (MNIST, two jobs).
    from mesc_tf import memory
    from mesc_tf.config import get_config

    n, arch = get_config("mnist").n_samples, get_config("mnist").arch
    limit = (memory.clustering_estimate(n) + sweep.training_memory(n, arch, 1)) // 2
    monkeypatch.setenv("MESC_MEMORY_LIMIT_BYTES", str(2 * limit))
    real_check("mnist", 2, 1, trains=False)
    with pytest.raises(MescError, match="2 jobs on mnist need about"):
        real_check("mnist", 2, 1)


def test_sweep_summary_after_a_run_is_of_this_grid_and_its_new_trials(
        synthetic_data, toy_weights, tmp_path, capsys, monkeypatch):
    """The closing summary reads the file again (so it holds the trials just run) and ranks
    only the trials of the grid asked for, not every trial in the file."""
    monkeypatch.setenv("MESC_DATA_DIR", str(synthetic_data))
    ident = sources.resolve_autoencoder("toy", weights=str(toy_weights)).ident

    def fake_run_groups(groups, out=None, **kw):
        for g in groups:
            for t in g.trials:
                sweep.append_jsonl(out, _toy_rec(ident, t.seed, t.settings.thr,
                                                 thr=t.settings.thr))
            yield {"records": [], "coef_cache": None, "steps_run": 4, "train_s": 0.0}

    monkeypatch.setattr(sweep, "run_groups", fake_run_groups)
    out = tmp_path / "s.jsonl"
    argv = ["--dataset", "toy", "--weights", str(toy_weights), "--jobs", "1", "--out", str(out)]

    def summary_rows(printed):
        return printed.split("best settings by median ACC")[1].splitlines()[2:]

    script = _script("sweep")
    script.main([*argv, "--grid", "thr=0.1,0.3"])
    assert len(summary_rows(capsys.readouterr().out)) == 2
    script.main([*argv, "--grid", "thr=0.1"])
    printed = capsys.readouterr().out
    assert "1 already in" in printed and len(summary_rows(printed)) == 1


# --- provenance: what every results file records --------------------------------------------


@pytest.mark.parametrize("rc, status, expected", [(0, "", "0123456789ab"),
                                                  (0, " M mesc_tf/cli.py\n", "0123456789ab-dirty"),
                                                  (128, "", "unknown")])
def test_code_revision_reads_git(monkeypatch, rc, status, expected):
    """The commit, '-dirty' with changes, 'unknown' outside a git checkout."""
    root = Path(mesc_tf.__file__).resolve().parents[1]

    def fake_run(args, **kwargs):
        out = f"{root}\n0123456789ab\n" if "rev-parse" in args else status
        return subprocess.CompletedProcess(args, rc, out, "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    assert code_revision() == expected


def test_code_revision_inside_another_repository_is_unknown(monkeypatch):
    """Installed inside some other git repository (a virtualenv kept in one), the package's
    folder is not that repository's top: its commit says nothing about this code."""
    def fake_run(args, **kwargs):
        out = "/home/someone/project\nfedcba987654\n" if "rev-parse" in args else ""
        return subprocess.CompletedProcess(args, 0, out, "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    assert code_revision() == "unknown"


def test_code_revision_without_git_is_unknown(monkeypatch):
    def no_git(args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", "git")

    monkeypatch.setattr(subprocess, "run", no_git)
    assert code_revision() == "unknown"


def test_provenance_names_the_libraries_and_the_machine(monkeypatch):
    """versions() keys, as results files record them; machine() counts the usable cores and
    lists BLAS libraries only."""
    from mesc_tf import provenance

    assert set(provenance.versions()) == {"mesc_tf", "python", "tensorflow", "keras", "numpy",
                                          "scipy", "sklearn", "h5py"}
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    m = provenance.machine()
    assert m["cores"] == 1
    assert m["blas"] and all(b.split()[0] in ("openblas", "mkl", "blis", "flexiblas")
                             for b in m["blas"])


def test_versions_are_read_without_importing_tensorflow():
    """A script that does not train (bench.py's parent, spectral_routes.py) records the
    versions without importing TensorFlow (seconds): the same numbers as the modules give."""
    code = ("import sys, json\nfrom mesc_tf import provenance\nv = provenance.versions()\n"
            "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules, v\n"
            "import tensorflow, keras, numpy, scipy, sklearn, h5py\n"
            "w = provenance.versions()\n"
            "assert v == w and w['tensorflow'] == tensorflow.__version__, (v, w)\n"
            "assert w['keras'] == keras.__version__ and w['sklearn'] == sklearn.__version__\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_recorded_command_is_main_s_argv_quoted(monkeypatch):
    """provenance.command: main's argv where it was given one (not the calling process's, a
    test runner's), else sys.argv[1:]; paths as text, quoted where they hold a space."""
    from mesc_tf import provenance

    monkeypatch.setattr(sys, "argv", ["pytest", "-q"])
    assert provenance.command("x.py", ["--out", Path("a b")]) == "x.py --out 'a b'"
    assert provenance.command("x.py", []) == "x.py"
    assert provenance.command("x.py") == "x.py -q"


def test_sweep_grid_adds_up_over_repeated_options():
    """sweep.py --grid twice: both axes (the second used to replace the first)."""
    args = _script("sweep").parse_args(["--dataset", "toy", "--grid", "reg1=1,2",
                                        "--grid", "thr=0.1,0.2"])
    assert args.grid == {"reg1": [1.0, 2.0], "thr": [0.1, 0.2]}


def test_summary_only_reads_a_results_file_archived_into_parts(tmp_path, capsys):
    """--summary-only refused a file whose records were all archived (s.jsonl renamed to
    s.part1.jsonl, as the README says to) with 'no sweep results', though a sweep counts them."""
    out = tmp_path / "s.jsonl"
    sweep.append_jsonl(out, _toy_rec("none", 0, 0.5, reg1=1.0))
    out.rename(tmp_path / "s.part1.jsonl")
    _script("sweep").main(["--dataset", "toy", "--summary-only", "--no-pretrain",
                           "--out", str(out)])
    printed = capsys.readouterr().out
    assert printed.startswith("1 of the file's records") and "50.00" in printed


def test_summary_counts_a_setting_once_however_its_numbers_are_spelt():
    """A record may hold 1 for the float 1.0 (record_problem takes it; record_key reads it as
    1.0), but summarize keyed its rows by the raw settings: one setting became two rows, each
    with fewer seeds."""
    records = [_rec(1.0, 0, 0.5), _rec(1.0, 1, 0.7)]
    records[1]["settings"] = {**records[1]["settings"], "reg1": 1}
    rows = sweep.summarize(records)
    assert len(rows) == 1 and sorted(rows[0]["seeds"]) == [0, 1]
    assert isinstance(rows[0]["settings"]["reg1"], float)


def test_summary_only_says_which_asked_for_seeds_no_trial_has(tmp_path, capsys):
    """--summary-only --seeds 0-4 over trials of seeds 0-2 said 'the summary covers seeds 0-4'
    above rows of 3 seeds each: the header now names the seeds no finished trial has."""
    out = tmp_path / "s.jsonl"
    for seed in range(3):
        sweep.append_jsonl(out, _toy_rec("none", seed, 0.5, reg1=1.0))
    argv = ["--dataset", "toy", "--summary-only", "--no-pretrain", "--out", str(out)]
    _script("sweep").main([*argv, "--seeds", "0-4"])
    head = capsys.readouterr().out.splitlines()[0]
    assert head.endswith("covers seeds 0-4; seeds without a finished trial: 3-4")
    _script("sweep").main([*argv, "--seeds", "0-2"])
    assert capsys.readouterr().out.splitlines()[0].endswith("covers seeds 0-2")


def test_summary_order_of_exact_ties_does_not_depend_on_the_file_order():
    """Settings tied on every statistic rank the same whichever order the records were appended
    in (--jobs workers append in the order their groups finish)."""
    records = [_rec(reg1, seed, 0.5) for reg1 in (2.0, 1.0, 3.0) for seed in (0, 1)]
    orders = {tuple(r["settings"]["reg1"] for r in sweep.summarize(recs))
              for recs in (records, records[::-1], records[2:] + records[:2])}
    assert orders == {(1.0, 2.0, 3.0)}
