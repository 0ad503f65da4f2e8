"""experiments/pretrain.py end to end on a small synthetic ORL set (120 random images): what
its .h5 records, the options that reach the training, --resume and --force with a checkpoint,
the default output folder, a diverged run and a failed write. Found by mutation testing: each
test fails on a small bug the older tests let through."""

import json
import shlex
from pathlib import Path

import numpy as np
import pytest

from mesc_tf import cli, pipeline, provenance
from mesc_tf.config import Pretrain, get_config
from mesc_tf.errors import MescError
from synthetic import write_fea_gnd  # tests/synthetic.py
from test_reliability import invoke as invoke_script
from scripts import load_script  # tests/scripts.py

ROOT = Path(__file__).resolve().parents[1]
PRETRAIN = load_script("experiments/pretrain.py", "_pretrain_command")
ORL = get_config("orl")


def invoke(argv, capsys):
    """pretrain.py's main as ``__main__`` runs it. Returns (exit status, stdout, stderr)."""
    return invoke_script(PRETRAIN, argv, capsys)


@pytest.fixture(scope="module")
def orl(tmp_path_factory):
    """(data folder, images) of a 40 × 3 ORL file of random pixels."""
    from mesc_tf.data import load_dataset

    d = tmp_path_factory.mktemp("orl")
    write_fea_gnd(d / "ORL_32x32.mat", 40, 3)
    return d, load_dataset("orl", d).x


def _data(orl):
    return ["--dataset", "orl", "--data-dir", orl[0], "--quiet"]


def _checkpoint(orl, ckpt, steps=2):
    """An interrupted minibatch run's checkpoint as pretrain.py leaves it (seed 7, batch 50,
    lr 2e-3, saved every step), at step ``steps``."""
    from mesc_tf.training import configure_runtime

    configure_runtime(7)
    pipeline.pretrain(orl[1], ORL.arch, ORL.pretrain.replace(max_steps=steps, batch_size=50,
                                                             lr=2e-3),
                      verbose=0, seed=7, backup_dir=ckpt, checkpoint_every=1)
    (ckpt / "run.json").write_text(json.dumps({
        "batch_size": 50, "seed": 7, "lr": 2e-3, "initializer": "glorot_uniform", "init": None,
        "dataset": "orl", "checkpoint_every": 1}))


def _spy(monkeypatch):
    """Records each pipeline.pretrain call's (schedule, keyword arguments, info), and whether
    its checkpoint folder held a state when it began."""
    calls, real = [], pipeline.pretrain

    def spy(x, arch, schedule, **k):
        state = k.get("backup_dir") is not None and (Path(k["backup_dir"]) / "state.json").exists()
        ae, info = real(x, arch, schedule, **k)
        calls.append({"schedule": schedule, "kwargs": k, "info": info, "had_state": state})
        return ae, info

    monkeypatch.setattr(pipeline, "pretrain", spy)
    return calls


def test_the_file_records_the_run_that_made_it(orl, tmp_path, capsys, tensorboard_scalars):
    """--seed, --patience and --min-delta reach the training (no step improves by 0.5, so it
    stops 2 steps after the first and keeps the first's weights, which are those of a
    pipeline.pretrain seeded the same), --tensorboard gets its scalars, and the metadata says
    how many steps ran, which was kept, the whole-set error of the weights kept (not the last
    step's), the seed, the pixel scale and the library versions."""
    from mesc_tf.measures import relative_error
    from mesc_tf.training import configure_runtime
    from mesc_tf.weights import load_autoencoder

    out = tmp_path / "orl.h5"
    argv = [*_data(orl), "--seed", "3", "--max-steps", "6", "--patience", "2", "--min-delta",
            "0.5", "--tensorboard", tmp_path / "tb", "--out", out]
    code, _, err = invoke(argv, capsys)
    assert code == 0, err
    ae, meta = load_autoencoder(out, ORL.arch)
    # main(argv)'s own options, not the calling process's (here pytest's) sys.argv.
    assert meta["command"] == shlex.join(["python", "experiments/pretrain.py", *map(str, argv)])
    assert (meta["steps"], meta["best_step"], meta["max_steps"]) == (3, 1, 6)
    assert (meta["patience"], meta["min_delta"], meta["seed"]) == (2, 0.5, 3)
    assert meta["resumed_at_step"] is None and meta["init"] is None
    assert meta["initializer"] == ORL.pretrain.initializer and meta["lr"] == ORL.pretrain.lr
    assert meta["pixels"] == ORL.pixels
    assert meta["versions"] == json.loads(json.dumps(provenance.versions()))
    assert meta["relative_error"] == pytest.approx(relative_error(ae, orl[1]), rel=1e-7)
    assert tensorboard_scalars(tmp_path / "tb")["train"]["epoch_rel_err"] == [0, 1, 2]
    configure_runtime(3)
    first, _ = pipeline.pretrain(orl[1], ORL.arch, ORL.pretrain.replace(max_steps=1), verbose=0)
    for a, b in zip(ae.get_weights(), first.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_resume_alone_carries_on_as_the_checkpoints_run(orl, tmp_path, capsys, monkeypatch):
    """`--resume` with none of the run's options takes its seed, batch size and first rate from
    run.json (they fix the minibatch order and the rate's floor), not the defaults, and the
    file records them."""
    from mesc_tf.weights import read_autoencoder_file

    _checkpoint(orl, tmp_path / "orl.checkpoint")
    calls = _spy(monkeypatch)
    code, printed, err = invoke([*_data(orl), "--resume", "--max-steps", "3", "--out",
                                 tmp_path / "orl.h5"], capsys)
    assert code == 0, err
    (call,) = calls
    assert call["kwargs"]["seed"] == 7 and call["schedule"].batch_size == 50
    assert call["schedule"].lr == 2e-3 and "lr=0.002," in printed
    assert call["had_state"] and len(call["info"]["history"]["rel_err"]) == 1  # step 3 only
    meta = read_autoencoder_file(tmp_path / "orl.h5")[1]
    assert (meta["seed"], meta["batch_size"], meta["lr"], meta["steps"]) == (7, 50, 2e-3, 3)


def test_resume_of_a_checkpoint_at_max_steps_takes_no_step(orl, tmp_path, capsys):
    """A run killed after its last step, before the .h5: resumed with the same --max-steps it
    writes the file without another step (only a checkpoint past --max-steps is refused)."""
    from mesc_tf.weights import read_autoencoder_file

    _checkpoint(orl, tmp_path / "orl.checkpoint")
    out = tmp_path / "orl.h5"
    code, _, err = invoke([*_data(orl), "--resume", "--max-steps", "2", "--out", out], capsys)
    assert code == 0, err
    meta = read_autoencoder_file(out)[1]
    assert (meta["steps"], meta["resumed_at_step"]) == (2, 2)


def test_force_starts_over_instead_of_resuming(orl, tmp_path, capsys, monkeypatch):
    """--force without --resume deletes an unfinished checkpoint before training: the new run
    starts at step 0 rather than continuing the old run's state."""
    _checkpoint(orl, tmp_path / "orl.checkpoint")
    calls = _spy(monkeypatch)
    code, _, err = invoke([*_data(orl), "--force", "--max-steps", "3", "--checkpoint-every", "1",
                           "--out", tmp_path / "orl.h5"], capsys)
    assert code == 0, err
    (call,) = calls
    assert not call["had_state"] and len(call["info"]["history"]["rel_err"]) == 3


def test_a_failed_write_keeps_the_checkpoint(orl, tmp_path, capsys, monkeypatch):
    """The checkpoint is deleted only once the .h5 is written: if writing it fails, the run can
    still be resumed."""
    from mesc_tf import weights

    def full_disk(*a, **k):
        raise MescError("cannot write the output: the disk is full")

    monkeypatch.setattr(weights, "save_autoencoder", full_disk)
    code, _, err = invoke([*_data(orl), "--max-steps", "2", "--checkpoint-every", "1", "--out",
                           tmp_path / "orl.h5"], capsys)
    assert code == 2 and "the disk is full" in err
    assert json.loads((tmp_path / "orl.checkpoint" / "state.json").read_text())["epoch"] == 2
    assert not (tmp_path / "orl.h5").exists()


def test_default_output_is_under_mesc_pretrained_dir(orl, tmp_path, capsys, monkeypatch):
    """Without --out the file goes to $MESC_PRETRAINED_DIR/<dataset>.h5, where run.py looks
    (never relative to the working directory); without --quiet the progress bar shows the
    step's relative error."""
    monkeypatch.setenv("MESC_PRETRAINED_DIR", str(tmp_path / "ae"))
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    code, printed, err = invoke([*_data(orl)[:-1], "--max-steps", "1"], capsys)
    assert code == 0, err
    assert "1/1" in printed and "rel_err:" in printed
    assert (tmp_path / "ae" / "orl.h5").is_file()
    assert not list((tmp_path / "cwd").iterdir())


def test_a_diverged_run_writes_nothing(orl, tmp_path, capsys, monkeypatch):
    """A non-finite final error (here faked) ends in one error line and no file."""
    import mesc_tf.measures

    monkeypatch.setattr(mesc_tf.measures, "relative_error", lambda ae, x: float("nan"))
    code, _, err = invoke([*_data(orl), "--max-steps", "1", "--out", tmp_path / "orl.h5"], capsys)
    assert code == 2 and "error: pretraining diverged (relative reconstruction error nan)" in err
    assert not list(tmp_path.iterdir())


def test_a_warm_start_records_no_initializer(orl, tmp_path, capsys):
    """--init continues an existing auto-encoder: the file names that start, and no
    initializer, since none drew its weights."""
    from mesc_tf.model import ConvAutoEncoder
    from mesc_tf.weights import read_autoencoder_file, save_autoencoder

    start = save_autoencoder(ConvAutoEncoder(ORL.arch).build_for_input(), tmp_path / "start.h5")
    out = tmp_path / "orl.h5"
    code, _, err = invoke([*_data(orl), "--init", start, "--max-steps", "0",
                           "--activation-scale", "2", "--out", out], capsys)
    assert code == 0, err
    meta = read_autoencoder_file(out)[1]
    assert meta["initializer"] is None and meta["init"]["path"] == str(start)


def test_pretrain_uses_the_minibatch_seed():
    """pipeline.pretrain's ``seed`` orders the minibatches: another seed, other batches, other
    errors from the same start."""
    from mesc_tf.training import configure_runtime

    x = np.random.default_rng(0).random((20, 32, 32, 1)).astype(np.float32)
    errors = []
    for seed in (5, 6):
        configure_runtime(0)
        _, info = pipeline.pretrain(x, ORL.arch, Pretrain(max_steps=2, batch_size=4), verbose=0,
                                    seed=seed)
        errors.append(info["history"]["rel_err"][1])
    assert errors[0] != errors[1]


def test_resume_refuses_options_a_full_batch_fresh_run_did_not_have(orl, tmp_path, capsys):
    """run.json records a full-batch run's batch size, and a fresh start's --init, as None: a
    --batch-size or --init on --resume contradicts it and is refused, not silently ignored
    (a --batch-size of the whole set or more is the same full batch, and is taken)."""
    from mesc_tf.model import ConvAutoEncoder
    from mesc_tf.training import configure_runtime
    from mesc_tf.weights import save_autoencoder

    start = save_autoencoder(ConvAutoEncoder(ORL.arch).build_for_input(), tmp_path / "x.h5")
    ckpt = tmp_path / "orl.checkpoint"
    configure_runtime(0)
    pipeline.pretrain(orl[1], ORL.arch, ORL.pretrain.replace(max_steps=1), verbose=0,
                      backup_dir=ckpt, checkpoint_every=1)
    (ckpt / "run.json").write_text(json.dumps({
        "batch_size": None, "seed": 0, "lr": ORL.pretrain.lr, "initializer": "glorot_uniform",
        "init": None, "dataset": "orl", "checkpoint_every": 1}))
    out = tmp_path / "orl.h5"
    for argv, needle in ((["--batch-size", "60"], "--batch-size 60 differs from the full batch"),
                         (["--init", start], "differs from the fresh start (no --init)")):
        code, _, err = invoke([*_data(orl), "--resume", "--max-steps", "2", "--out", out, *argv],
                              capsys)
        assert code == 2 and needle in err and "resume without it" in err, err
    code, _, err = invoke([*_data(orl), "--resume", "--max-steps", "2", "--batch-size", "500",
                           "--out", out], capsys)
    assert code == 0, err


def test_a_run_that_kept_its_starting_weights_says_so(orl, tmp_path, capsys, monkeypatch):
    """best_step 0 after some steps (no step improved on the start: pipeline.pretrain kept it)
    prints a note naming the rate; a run whose steps improved prints none."""
    real = pipeline.pretrain
    out = tmp_path / "a.h5"
    code, stdout, err = invoke([*_data(orl), "--max-steps", "2", "--out", out], capsys)
    assert code == 0, err
    assert "(best 2)" in stdout and "note:" not in stdout

    def kept_start(*a, **k):
        ae, info = real(*a, **k)
        return ae, {**info, "best_step": 0}

    monkeypatch.setattr(pipeline, "pretrain", kept_start)
    code, stdout, err = invoke([*_data(orl), "--init", out, "--max-steps", "2", "--lr", "0.3",
                                "--out", tmp_path / "b.h5"], capsys)
    assert code == 0, err
    assert ("note: no step improved on the starting weights, so they were kept; a converged "
            "--init may need a lower --lr than 0.3") in stdout


@pytest.mark.parametrize("checkpoint_every", ["0", "1"])
def test_tensorboard_logs_go_with_the_checkpoint(orl, tmp_path, capsys, monkeypatch,
                                                 checkpoint_every):
    """An interrupted run without a checkpoint said "nothing was kept" and left the
    --tensorboard folder (and the parents it made); with a checkpoint the logs stay, for the
    resumed run to append to."""
    from mesc_tf import weights

    def ctrl_c(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(weights, "save_autoencoder", ctrl_c)
    cleanup, tb = [], tmp_path / "logs" / "deep"
    argv = [*_data(orl), "--max-steps", "2", "--checkpoint-every", checkpoint_every,
            "--tensorboard", tb, "--out", tmp_path / "orl.h5"]
    with pytest.raises(SystemExit) as e:
        cli.main_guard(lambda: PRETRAIN.main([str(a) for a in argv], cleanup=cleanup), cleanup,
                       lambda: cli.training_interrupted(PRETRAIN._checkpointing[0]))
    err = capsys.readouterr().err
    assert e.value.code == 130
    if checkpoint_every == "0":
        assert "nothing was kept" in err and not (tmp_path / "logs").exists()
    else:
        assert "checkpoint is kept" in err and any(tb.rglob("events.out.tfevents*"))


def test_an_interrupted_run_keeps_a_checkpoint_by_default(orl, tmp_path, capsys, monkeypatch):
    """Without --checkpoint-every a run saves every CHECKPOINT_EVERY steps (Ctrl-C lost every
    step before): interrupted before its file is written, it resumes with --resume alone and
    keeps saving at that interval; --checkpoint-every 0 saves none."""
    from mesc_tf import weights
    from mesc_tf.weights import read_autoencoder_file

    monkeypatch.setattr(PRETRAIN, "CHECKPOINT_EVERY", 2)
    real = weights.save_autoencoder

    def ctrl_c(*a, **k):
        raise KeyboardInterrupt

    def interrupted(argv):  # as __main__ runs it, with its Ctrl-C line
        cleanup = []
        capsys.readouterr()
        with pytest.raises(SystemExit) as e:
            cli.main_guard(lambda: PRETRAIN.main([str(a) for a in argv], cleanup=cleanup),
                           cleanup, lambda: cli.training_interrupted(PRETRAIN._checkpointing[0]))
        return e.value.code, capsys.readouterr().err

    monkeypatch.setattr(weights, "save_autoencoder", ctrl_c)
    out = tmp_path / "orl.h5"
    code, err = interrupted([*_data(orl), "--max-steps", "3", "--out", out])
    assert code == 130 and "the last checkpoint is kept" in err and "--resume" in err
    state = json.loads((tmp_path / "orl.checkpoint" / "state.json").read_text())
    assert state["epoch"] == 3  # the last step is always saved
    assert json.loads((tmp_path / "orl.checkpoint" / "run.json").read_text())[
        "checkpoint_every"] == 2
    monkeypatch.setattr(weights, "save_autoencoder", real)
    calls = _spy(monkeypatch)
    code, _, err = invoke([*_data(orl), "--resume", "--max-steps", "5", "--out", out], capsys)
    assert code == 0, err
    assert calls[0]["had_state"] and calls[0]["kwargs"]["checkpoint_every"] == 2
    assert read_autoencoder_file(out)[1]["steps"] == 5
    assert not (tmp_path / "orl.checkpoint").exists()
    monkeypatch.setattr(weights, "save_autoencoder", ctrl_c)
    code, err = interrupted([*_data(orl), "--max-steps", "3", "--checkpoint-every", "0",
                             "--out", tmp_path / "b.h5"])
    assert code == 130 and "nothing was kept" in err and not (tmp_path / "b.checkpoint").exists()


def test_an_output_named_like_its_checkpoint_folder_is_refused(orl, tmp_path, capsys):
    """--out X.checkpoint would be its own checkpoint folder: it failed after the training."""
    code, _, err = invoke([*_data(orl), "--max-steps", "2", "--out", tmp_path / "a.checkpoint"],
                          capsys)
    assert code == 2 and "name the output e.g. " in err and err.count("\n") == 1
    assert not list(tmp_path.iterdir())
