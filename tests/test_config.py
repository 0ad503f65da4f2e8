"""Tests for mesc_tf.config: the settings table against reference-facts §1.1-§1.5 (the
authors' released values) and the checks of Architecture, Settings and the helpers."""

import re

import numpy as np
import pytest

from mesc_tf.config import (DATASETS, Architecture, Settings, encoder_sizes, get_config,
                            method_settings)
from mesc_tf.errors import MescError

# reference-facts §1.1 and §1.2: N, K, image (h, w), encoder kernels and channels.
SHAPES = {
    "toy": (216, 3, (32, 32), (3,), (15,)),
    "orl": (400, 40, (32, 32), (3, 3, 3), (3, 3, 5)),
    "coil20": (1440, 20, (32, 32), (3,), (15,)),
    "coil40": (2880, 40, (32, 32), (3,), (20,)),
    "coil100": (7200, 100, (32, 32), (5,), (50,)),
    "eyaleb": (2432, 38, (48, 42), (5, 3, 3), (10, 20, 30)),
    "usps": (9298, 10, (16, 16), (5, 3, 3), (10, 20, 30)),
    "mnist": (10000, 10, (28, 28), (5, 3, 3), (10, 20, 30)),
}

# reference-facts §1.4: MESC's released COIL40 settings (MESC[TF2].py).
MESC_COIL40 = dict(framework="decoupled", regularizer="entropy", reg1=1.0, reg2=0.1, lr=1e-4,
                   epochs=127, coef_init=1e-4, recon_scale=1.0, thr=0.03, subspace_dim=12,
                   power=8.0, variant="mesc")

# reference-facts §1.5: DSC-Net's released scripts (coupled, Σ C² with reg1 1, Adam lr 1e-3);
# EYaleB at K = 38: reg2 10^(K/10 − 3), 50 + 25·K steps, ρ under Python-2 division.
_DSC = dict(framework="coupled", regularizer="l2", reg1=1.0, lr=1e-3)
DSC_RELEASED = {
    "orl": dict(_DSC, reg2=0.2, epochs=700, coef_init=0.0, recon_scale=0.5, thr=0.2,
                subspace_dim=3, power=1.0, variant="dsc"),
    "coil20": dict(_DSC, reg2=150.0, epochs=30, coef_init=1e-8, recon_scale=1.0, thr=0.04,
                   subspace_dim=12, power=8.0, variant="dsc_diag"),
    "coil100": dict(_DSC, reg2=30.0, epochs=120, coef_init=1e-4, recon_scale=1.0, thr=0.04,
                    subspace_dim=12, power=8.0, variant="dsc"),
    "eyaleb": dict(_DSC, reg2=10 ** (38 / 10 - 3), epochs=50 + 25 * 38, coef_init=1e-4,
                   recon_scale=0.5, thr=max(0.4 - ((38 - 1) // 10) * 0.1, 0.1),
                   subspace_dim=10, power=3.5, variant="dsc"),
}


def test_every_dataset_has_the_reference_sizes():
    """N, K, image shape, kernels and channels of §1.1/§1.2 (COIL40's K also sets how many of
    COIL100.mat's rows it takes; a wrong N or K is a wrong subset)."""
    assert set(SHAPES) == set(DATASETS)
    for name, (n, k, shape, kernels, channels) in SHAPES.items():
        cfg = get_config(name)
        assert (cfg.name, cfg.n_samples, cfg.n_clusters) == (name, n, k), name
        assert cfg.arch == Architecture(shape, kernels, channels), name


def test_mesc_coil40_is_the_released_setting():
    """The only MESC settings the authors released (§1.4), which are also Settings()'s
    defaults and the template the other datasets change."""
    assert get_config("coil40").mesc.to_dict() == MESC_COIL40
    assert Settings().to_dict() == MESC_COIL40
    assert method_settings("coil40", "our").to_dict() == MESC_COIL40


@pytest.mark.parametrize("name", sorted(DSC_RELEASED))
def test_dsc_settings_are_the_released_scripts(name):
    """DSC-Net's four released scripts (§1.5), value by value."""
    got = get_config(name).dsc.to_dict()
    want = DSC_RELEASED[name]
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-12) if isinstance(value, float) else (
            got[key] == value), (name, key, got[key], value)


def test_dsc_settings_without_a_released_script_borrow_one():
    """No DSC-Net script for COIL40, USPS, MNIST or Toy: the config says they take COIL100's
    (the first three) and COIL20's (Toy, three COIL20 objects)."""
    for name in ("coil40", "usps", "mnist"):
        assert get_config(name).dsc == get_config("coil100").dsc, name
    assert get_config("toy").dsc == get_config("coil20").dsc


def test_method_settings_map_each_row():
    """our = the mesc settings; our_wo_net = coupled; dsc_l1 / dsc_l2 = DSC with Σ|C| / Σ C²."""
    for name in DATASETS:
        cfg = get_config(name)
        assert method_settings(name, "our") == cfg.mesc
        assert method_settings(name, "our_wo_net").framework == "coupled"
        l1, l2 = method_settings(name, "dsc_l1"), method_settings(name, "dsc_l2")
        assert (l1.regularizer, l2.regularizer) == ("l1", "l2")
        assert l2 == cfg.dsc.replace(regularizer="l2") and l1.replace(regularizer="l2") == l2


def test_get_config_ignores_case():
    """The CLI and the estimator pass names as the user typed them (e.g. ORL, EYaleB)."""
    assert get_config("ORL") is get_config("orl")
    assert get_config("EYaleB") is get_config("eyaleb")
    with pytest.raises(MescError, match="unknown dataset"):
        get_config("cifar")


def test_encoder_sizes_round_up():
    """'SAME' with stride 2 gives ceil(size / 2): 48x42 → 24x21 → 12x11 → 6x6 (§1.2)."""
    assert encoder_sizes(get_config("eyaleb").arch) == [(48, 42), (24, 21), (12, 11), (6, 6)]
    assert encoder_sizes(get_config("mnist").arch) == [(28, 28), (14, 14), (7, 7), (4, 4)]


@pytest.mark.parametrize("kwargs, match", [
    (dict(image_shape=(8, 8), kernels=(3,), channels=(0,)), "channels must be whole"),
    (dict(image_shape=(8, 8), kernels=(), channels=()), "as many kernels as channels"),
    (dict(image_shape=(8, 8, 3), kernels=(3,), channels=(2,)), "one-channel"),
    (dict(image_shape=(8, 8), kernels=(4,), channels=(2,)), "must be odd"),
])
def test_architecture_refuses(kwargs, match):
    """No layer with 0 channels, no empty encoder, no RGB image_shape, no even kernel."""
    with pytest.raises(MescError, match=match):
        Architecture(**kwargs)
    assert Architecture((8, 8, 1), (3,), (2,)).image_shape == (8, 8)


def test_settings_edges():
    """power must be > 0 (C^power of 0 is all ones), 0 epochs is allowed (cluster the starting
    C), and replace() ignores None (the CLI passes every unset option as None)."""
    with pytest.raises(MescError, match="power"):
        Settings(power=0.0)
    assert Settings(epochs=0).epochs == 0
    s = Settings()
    assert s.replace(thr=None, epochs=None, variant=None) == s
    assert s.replace(thr=0.5, power=None).thr == 0.5


@pytest.mark.parametrize("change, message", [
    ({"lr": True}, "lr (--lr) must be a number, got True"),
    ({"reg1": "1"}, "reg1 (--reg1) must be a number, got '1'"),
    ({"thr": np.array([0.2])}, "thr (--thr) must be a number, got array"),
    ({"coef_init": np.array(1e-4)}, "coef_init (--coef-init) must be a number"),
    ({"epochs": "5"}, "epochs (--epochs) must be a number, got '5'"),
    ({"subspace_dim": True}, "subspace_dim (--subspace-dim) must be a number, got True"),
    ({"epoch": 3}, "unknown setting epoch; the settings are framework, regularizer, reg1"),
])
def test_settings_refuse_values_that_are_not_numbers_and_unknown_names(change, message):
    """A bool, a string or an array is not a setting's number: each used to pass (True as 1,
    an array as itself, failing deep in Keras or after training) or fail with a raw TypeError;
    an unknown name raised dataclasses' TypeError. NumPy scalars stay accepted."""
    with pytest.raises(MescError, match=re.escape(message)):
        Settings().replace(**change)
    ok = Settings().replace(reg2=np.float32(0.5), epochs=np.int64(3), subspace_dim=4.0)
    assert (ok.reg2, ok.epochs, ok.subspace_dim) == (0.5, 3, 4)


def test_pretrain_replace_refuses_unknown_names_as_settings_do():
    """Pretrain.replace raised dataclasses' TypeError for a misspelt name."""
    from mesc_tf.config import Pretrain

    with pytest.raises(MescError, match="unknown pretraining setting max_step; the pretraining "
                                        "settings are lr, max_steps"):
        Pretrain().replace(max_step=10)
    assert Pretrain().replace(max_steps=10, lr=None) == Pretrain(max_steps=10)


@pytest.mark.parametrize("table", ["main_table.json", "autoencoders/ours/main_table.json",
                                   "autoencoders/original/main_table.json"])
def test_the_committed_tables_were_made_with_todays_settings(table):
    """The tuned settings of every dataset (ORL's ρ 0.17, say: 0.2 costs 3 ACC points) are
    pinned by the cells the README publishes: a change to config.py must rerun them."""
    import json
    from pathlib import Path

    from mesc_tf.sweep import normalized

    path = Path(__file__).resolve().parents[1] / "experiments" / "results" / table
    cells = [(d, m, c) for d, row in json.loads(path.read_text()).items()
             for m, c in row.items()]
    assert len(cells) >= 12
    for d, m, cell in cells:
        assert cell["max_epochs"] is None
        assert cell["settings"] == normalized(method_settings(d, m)), (
            f"{d}/{m}: config.py no longer gives the settings of {path}'s cell; rerun it "
            f"(make table DATASETS={d}) or restore them")
