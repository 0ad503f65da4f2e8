"""Auto-encoder weights on disk: the project's .h5 files and the authors' TF1 checkpoints
(reference-facts §1.3, pitfall 11)."""

import json
import os
from pathlib import Path

import h5py
import numpy as np
import pytest
import tensorflow as tf

from mesc_tf import data
from mesc_tf.config import Architecture, get_config
from mesc_tf.errors import MescError
from mesc_tf.model import ConvAutoEncoder
from mesc_tf.measures import relative_error
from mesc_tf.weights import (assign_weights, convert_tf1_checkpoint, load_autoencoder,
                             load_tf1_checkpoint, read_autoencoder_file, read_tf1_checkpoint,
                             save_autoencoder)

pytestmark = pytest.mark.usefixtures("runtime")

ARCH = get_config("orl").arch


def expect_error(match, fn, *args, **kwargs):
    with pytest.raises(MescError, match=match) as info:
        fn(*args, **kwargs)
    assert "\n" not in str(info.value)
    return str(info.value)


def random_images(arch, n=4, seed=0):
    rng = np.random.default_rng(seed)
    return tf.constant(rng.random((n, *arch.image_shape, 1)) * 255, tf.float32)


def all_weights(ae):
    return [v.numpy() for layer in ae.named_layers for v in (layer.kernel, layer.bias)]


@pytest.fixture
def saved(tmp_path):
    ae = ConvAutoEncoder(ARCH).build_for_input()
    for layer in ae.named_layers:  # non-zero biases, so a bias mix-up would show
        layer.bias.assign(tf.random.normal(layer.bias.shape))
    path = save_autoencoder(ae, tmp_path / "ae.h5", {"dataset": "orl", "steps": np.int64(7)})
    return ae, path


# --- the project's .h5 format ----------------------------------------------------------------


def test_h5_round_trip(saved):
    ae, path = saved
    loaded, meta = load_autoencoder(path, ARCH)
    assert loaded.arch == ARCH and meta == {"dataset": "orl", "steps": 7}
    for a, b in zip(all_weights(ae), all_weights(loaded)):
        np.testing.assert_array_equal(a, b)
    x = random_images(ARCH)
    np.testing.assert_array_equal(ae(x).numpy(), loaded(x).numpy())
    assert load_autoencoder(path)[0].arch == ARCH  # the file knows its architecture
    assert [p.name for p in path.parent.iterdir()] == ["ae.h5"]  # no temporary file left


@pytest.mark.parametrize("other", [
    Architecture(image_shape=(32, 32), kernels=(3,), channels=(15,)),
    Architecture(image_shape=(64, 64), kernels=ARCH.kernels, channels=ARCH.channels),
    Architecture(image_shape=ARCH.image_shape, kernels=ARCH.kernels, channels=(3, 3, 6))],
    ids=["layers", "image shape", "channels"])
def test_h5_other_architecture(saved, other):
    _, path = saved
    msg = expect_error("holds an auto-encoder for", load_autoencoder, path, other)
    assert str(other.to_dict()) in msg and str(ARCH.to_dict()) in msg


@pytest.mark.parametrize("arch", [(32, 32), ARCH.to_dict()], ids=["image shape", "dict"])
def test_h5_arch_of_another_type_is_one_error(saved, arch):
    """load_autoencoder(path, arch) with an image shape or a dict: one MescError, not the
    AttributeError of its message's arch.to_dict()."""
    expect_error("arch must be a mesc_tf.config.Architecture or None, got "
                 f"{type(arch).__name__}", load_autoencoder, saved[1], arch)


def test_h5_wrong_layer_shape(saved):
    _, path = saved
    with h5py.File(path, "a") as f:
        del f["enc_1"]["kernel"]
        f["enc_1"]["kernel"] = np.zeros((5, 5, 3, 3), np.float32)
    msg = expect_error("enc_1", load_autoencoder, path, ARCH)
    assert "(5, 5, 3, 3)" in msg and "(3, 3, 3, 3)" in msg


def test_h5_missing_layer(saved):
    _, path = saved
    with h5py.File(path, "a") as f:
        del f["dec_2"]
    expect_error("needs .*dec_2", load_autoencoder, path, ARCH)


@pytest.mark.parametrize("error,readable", [
    (PermissionError(13, "Unable to synchronously open file (errno = 13, 'Permission denied')"),
     True),
    (OSError(1, "Unable to synchronously open file (errno = 1, 'Operation not permitted')"), True),
    (OSError("Unable to synchronously open file (file signature not found)"), False)])
def test_h5_unreadable_file_is_not_called_invalid(saved, monkeypatch, error, readable):
    """A file h5py may not open (permission denied: its errno, or a file this process may not
    read) says so, not "not a valid .h5 file: re-create it" (as root, chmod denies nothing:
    h5py.File and os.access stand in)."""
    _, path = saved

    def denied(*args, **kwargs):
        raise error

    monkeypatch.setattr(h5py, "File", denied)
    monkeypatch.setattr(os, "access", lambda p, mode: readable)
    message = expect_error("permission denied", load_autoencoder, path, ARCH)
    assert str(path) in message and "not a valid" not in message and "re-create" not in message


def test_h5_bad_files(tmp_path):
    garbage = tmp_path / "garbage.h5"
    garbage.write_bytes(b"\x00\x01not an hdf5 file at all" * 20)
    expect_error("not a valid .h5", load_autoencoder, garbage)
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["enc_0/kernel"] = np.zeros((3, 3, 1, 3), np.float32)
    # The hint names no option (the message reaches pretrain.py --init and Python callers).
    expect_error(r"not a mesc-tf auto-encoder file .*convert_tf1_checkpoint", load_autoencoder,
                 foreign)
    expect_error("not found", load_autoencoder, tmp_path / "absent.h5")


def test_h5_damaged_contents_are_refused(saved):
    """A NaN weight, another format version, a stray group: one line naming the problem, and
    a refused file leaves the model it was loading into as it was."""
    ae, path = saved
    with h5py.File(path, "a") as f:
        f["dec_2"]["bias"][0] = np.nan
    expect_error("layer dec_2 bias holds NaN", load_autoencoder, path, ARCH)
    _, _, weights = read_autoencoder_file(path)
    for layer in ae.named_layers:  # unlike the file's, so that a partial assignment would show
        layer.kernel.assign(layer.kernel + 1.0)
    before = all_weights(ae)
    with pytest.raises(MescError, match="test: layer dec_2 bias holds NaN"):
        assign_weights(ae, weights, "test")
    for a, b in zip(before, all_weights(ae)):  # enc_0 … dec_1 were not assigned either
        np.testing.assert_array_equal(a, b)
    with h5py.File(path, "a") as f:
        f["dec_2"]["bias"][0] = 0.0
        f.attrs["version"] = 99
    expect_error("format version 99, but this mesc-tf reads version 1", load_autoencoder, path)
    with h5py.File(path, "a") as f:
        f.attrs["version"] = 1
        f["enc_0"]["extra"] = np.zeros(1)
    expect_error("'enc_0' is not a layer holding just a kernel and a bias", load_autoencoder,
                 path)
    with h5py.File(path, "a") as f:
        del f["enc_0"]["extra"]
        f.create_group("junk")
    expect_error("'junk' is not a layer", load_autoencoder, path)


def test_h5_with_damaged_internals_is_refused(saved, tmp_path):
    """Bytes overwritten anywhere past the header (here 256 at a time, every 1/40 of the
    file): the file still loads, or is refused with one line. h5py fails on some of them with
    a RuntimeError or an OSError from inside (bad symbol table node, ...), which must reach
    the user as the file being damaged, not as h5py's exception."""
    _, path = saved
    raw = path.read_bytes()
    damaged, seen = tmp_path / "damaged.h5", set()
    for start in range(512, len(raw), len(raw) // 40):
        damaged.write_bytes(raw[:start] + b"\xab" * 256 + raw[start + 256:])
        try:
            read_autoencoder_file(damaged)
        except MescError as e:
            assert "\n" not in str(e) and str(damaged) in str(e)
            seen.add("h5py's own failure" if " is damaged (" in str(e) else "checked")
    assert "h5py's own failure" in seen, seen  # the case this test is for still occurs


# --- the authors' TF1 checkpoints ------------------------------------------------------------


@pytest.mark.parametrize("name", ["orl", "coil20", "coil40", "coil100", "eyaleb", "usps",
                                  "mnist"])
def test_tf1_checkpoint_conversion(name, tf1_ckpts, tmp_path):
    """Every released checkpoint reads as its dataset's architecture, and the converted .h5
    gives the same auto-encoder as loading the checkpoint directly."""
    arch = get_config(name).arch
    ckpt_arch, weights = read_tf1_checkpoint(tf1_ckpts[name], arch.image_shape)
    assert ckpt_arch == arch
    direct = load_tf1_checkpoint(tf1_ckpts[name], arch)
    reader = tf.train.load_checkpoint(str(tf1_ckpts[name]))
    np.testing.assert_array_equal(direct.get_layer("dec_0").kernel.numpy(),
                                  reader.get_tensor("dec_w0"))  # no flip, no transpose
    n = len(arch.kernels)  # biases: Variable, Variable_1, ..., encoder first
    np.testing.assert_array_equal(direct.get_layer(f"dec_{n - 1}").bias.numpy(),
                                  reader.get_tensor(f"Variable_{2 * n - 1}"))
    out = convert_tf1_checkpoint(tf1_ckpts[name], arch.image_shape, tmp_path / f"{name}.h5",
                                 {"dataset": name})
    converted, meta = load_autoencoder(out, arch)
    assert meta["dataset"] == name and meta["converted_from"] == str(tf1_ckpts[name])
    x = random_images(arch, seed=1)
    np.testing.assert_array_equal(converted(x).numpy(), direct(x).numpy())


def test_image_shape_with_its_channel_is_accepted(synthetic_tf1, tmp_path):
    assert Architecture((32, 32, 1), (3,), (15,)) == Architecture((32, 32), (3,), (15,))
    out = convert_tf1_checkpoint(synthetic_tf1["coil20"], (32, 32, 1), tmp_path / "c.h5")
    assert load_autoencoder(out, get_config("coil20").arch)[1]["converted_from"]
    expect_error("image_shape must be \\(height, width\\) of one-channel images, got "
                 "\\(32, 32, 3\\)", Architecture, (32, 32, 3), (3,), (15,))
    expect_error("got \\(32, 0\\)", Architecture, (32, 0), (3,), (15,))
    for shape in (32, None):  # a number for the pair: one error, nothing written
        expect_error("image_shape must be a sequence", convert_tf1_checkpoint,
                     synthetic_tf1["coil20"], shape, tmp_path / "n.h5")
    assert not (tmp_path / "n.h5").exists()


def test_architecture_normalises_and_checks_layers():
    """Lists compare and hash as tuples (a file's architecture is compared with the config's);
    an even kernel cannot mirror an odd-sized activation, so it is refused up front."""
    arch = Architecture([32, 32], [3, 3], [4, 8])
    assert arch == Architecture((32, 32), (3, 3), (4, 8)) and hash(arch) == hash(
        Architecture((32, 32), (3, 3), (4, 8)))
    expect_error("kernel sizes must be odd", Architecture, (28, 28), (4, 4, 4), (3, 3, 3))
    expect_error("channels must be whole numbers >= 1", Architecture, (28, 28), (3,), (0,))
    expect_error("channels must be whole numbers >= 1", Architecture, (28, 28), (3,), (2.0,))


@pytest.mark.parametrize("args, match", [
    ((16, (3,), (5,)), "image_shape must be a sequence \\(\\(height, width\\)\\), got 16"),
    (((16, 16), 3, (5,)), "kernels must be a sequence .*, got 3"),
    (((16, 16), (3,), "5"), "channels must be a sequence .*, got '5'"),
])
def test_architecture_refuses_numbers_for_sequences(args, match):
    """A bare number or a string where a sequence belongs: one line, not tuple()'s TypeError
    (a string would pass as a sequence of characters)."""
    expect_error(match, Architecture, *args)


def test_architecture_from_dict_needs_its_three_keys():
    """from_dict (files, pickled estimators) inverts to_dict and refuses any other dict."""
    arch = Architecture((16, 16), (3, 3), (4, 8))
    assert Architecture.from_dict(arch.to_dict()) == arch
    expect_error("a dict of image_shape, kernels, channels; got \\['image_shape', 'kernels'\\]",
                 Architecture.from_dict, {"image_shape": [16, 16], "kernels": [3]})
    expect_error("got list", Architecture.from_dict, [16, 16])


def test_tf1_checkpoint_wrong_architecture(synthetic_tf1):
    expect_error("kernels \\(3,\\) and channels \\(15,\\)", load_tf1_checkpoint,
                 synthetic_tf1["coil20"], get_config("coil40").arch)
    for given in (get_config("coil20"), (32, 32)):  # not an Architecture: no AttributeError
        expect_error(r"arch must be a mesc_tf.config.Architecture, got a "
                     rf"{type(given).__name__}; a dataset's is get_config\(name\).arch",
                     load_tf1_checkpoint, synthetic_tf1["coil20"], given)
    # read and convert take an Architecture as well as an image shape, and then check it.
    coil20 = get_config("coil20").arch
    assert read_tf1_checkpoint(synthetic_tf1["coil20"], coil20)[0] == coil20
    expect_error("kernels \\(3,\\) and channels \\(15,\\), but this dataset needs \\(3,\\) / "
                 "\\(20,\\)", read_tf1_checkpoint, synthetic_tf1["coil20"],
                 get_config("coil40").arch)


def forward_errors(ae, x, batch_size=2048):
    """(½·SSE, ‖x_r − x‖/‖x‖) over the whole set, in one pass."""
    sse = norm = 0.0
    for i in range(0, len(x), batch_size):
        xb = tf.constant(x[i:i + batch_size])
        sse += float(tf.reduce_sum(tf.square(ae(xb) - xb)))
        norm += float(tf.reduce_sum(tf.square(xb)))
    return 0.5 * sse, float(np.sqrt(sse / norm))


@pytest.mark.parametrize("name", ["coil40", "coil100"])
def test_coil100_checkpoints_expect_raw_pixels(name, tf1_ckpts, shared_data):
    """COIL100.mat is not here, but the authors' COIL40 and COIL100 auto-encoders can be asked
    which pixel scale they were trained on: on COIL20's images (the same kind of object
    photographs, 32×32) they reconstruct 0..255 ten times better than [0, 1] (COIL40 0.0051
    against 0.482, COIL100 0.022 against 0.257). So the loader keeps COIL100.mat's uint8 as
    stored."""
    x = data.load_dataset("coil20", shared_data).x  # [0, 1]
    ae = load_tf1_checkpoint(tf1_ckpts[name], get_config(name).arch)
    raw, unit = relative_error(ae, x * 255), relative_error(ae, x)
    assert raw < 0.05 and unit > 10 * raw, (raw, unit)


@pytest.mark.parametrize("name, sse, rel, rel_atol", [
    ("orl", 6.75719e7, 0.13043, 1e-5),
    ("coil20", 0.288799, 0.00143, 1e-5),
    ("mnist", 6.11286e8, 0.14507, 1e-5),
    ("eyaleb", None, 0.039, 1e-3),
    ("usps", None, 0.219, 1e-3),
])
def test_tf1_forward_regression(name, sse, rel, rel_atol, tf1_ckpts, shared_data):
    """The AE forward-pass numbers of reference-facts §1.3 on the shared data: they pin the
    loader (scale, orientation) and the conversion together."""
    x = data.load_dataset(name, shared_data).x
    ae = load_tf1_checkpoint(tf1_ckpts[name], get_config(name).arch)
    got_sse, got_rel = forward_errors(ae, x)
    np.testing.assert_allclose(got_rel, rel, rtol=0, atol=rel_atol)
    if sse is not None:
        np.testing.assert_allclose(got_sse, sse, rtol=1e-4)
    if name == "orl":  # the package's own figure agrees
        np.testing.assert_allclose(relative_error(ae, x, batch_size=150), got_rel, rtol=1e-5)


def test_tf1_checkpoint_named_by_one_of_its_files(synthetic_tf1):
    """``model.ckpt.index`` (what a file browser shows) stands for the prefix ``model.ckpt``."""
    arch = get_config("orl").arch
    _, expected = read_tf1_checkpoint(synthetic_tf1["orl"], arch.image_shape)
    for suffix in (".index", ".data-00000-of-00001"):
        _, weights = read_tf1_checkpoint(f"{synthetic_tf1['orl']}{suffix}", arch.image_shape)
        assert all(np.array_equal(weights[k][0], expected[k][0]) for k in expected)


def test_tf1_checkpoint_missing(tmp_path):
    expect_error("cannot read TF1 checkpoint", read_tf1_checkpoint, tmp_path / "nope.ckpt",
                 (32, 32))


def test_tf1_checkpoint_with_kernels_that_are_not_4d(tmp_path):
    """Every tensor present, but enc_w0 is a matrix: one MescError, not an IndexError."""
    prefix = str(tmp_path / "flat.ckpt")
    graph = tf.Graph()
    with graph.as_default():
        shapes = {"enc_w0": (9, 3), "dec_w0": (3, 3, 1, 3), "Variable": (3,), "Variable_1": (1,)}
        v = [tf.compat.v1.get_variable(k, initializer=np.zeros(s, np.float32))
             for k, s in shapes.items()]
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            tf.compat.v1.train.Saver(v).save(sess, prefix)
    expect_error("not 4-D convolution kernels: enc_w0;", read_tf1_checkpoint, prefix, (32, 32))


def test_tf1_checkpoint_missing_tensors(tmp_path):
    """A TF1-style checkpoint (v1 Saver, bare names) holding only enc_w0."""
    prefix = str(tmp_path / "partial.ckpt")
    graph = tf.Graph()
    with graph.as_default():
        w = tf.compat.v1.get_variable("enc_w0", initializer=np.zeros((3, 3, 1, 3), np.float32))
        saver = tf.compat.v1.train.Saver([w])
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            saver.save(sess, prefix)
    assert set(tf.train.load_checkpoint(prefix).get_variable_to_shape_map()) == {"enc_w0"}
    msg = expect_error("lacks tensors", read_tf1_checkpoint, prefix, (32, 32))
    assert "dec_w0" in msg and "Variable_1" in msg
    expect_error("lacks tensors", load_tf1_checkpoint, prefix, Architecture((32, 32), (3,), (3,)))


def test_readme_h5_example_runs_as_written(readme_example):
    """The README's saved-auto-encoder example, as written, gives the shapes its comments say."""
    code, scope = readme_example("Saved auto-encoders are")
    assert "float32 (400, 32, 32, 1)" in code and scope["images"].shape == (400, 32, 32, 1)
    assert "(400, 4, 4, 5)" in code and tuple(scope["z"].shape) == (400, 4, 4, 5)


def _save_tensors(prefix, tensors):
    names = list(tensors)
    tf.raw_ops.SaveV2(prefix=str(prefix), tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.convert_to_tensor(tensors[k]) for k in names])


def _tf1_tensors(arch):
    """The tensors of a TF1 checkpoint for ``arch`` (as synthetic.write_tf1_checkpoint)."""
    ae = ConvAutoEncoder(arch).build_for_input()
    n = len(arch.kernels)
    t = {f"enc_w{i}": ae.encoder_layers[i].kernel.numpy() for i in range(n)}
    t.update({f"dec_w{j}": ae.decoder_layers[j].kernel.numpy() for j in range(n)})
    for k, layer in enumerate(ae.named_layers):
        t["Variable" if k == 0 else f"Variable_{k}"] = np.random.default_rng(k).standard_normal(
            layer.bias.shape).astype(np.float32)
    return t


def test_tf1_checkpoint_with_adam_slots_reads_its_layers(tmp_path):
    """A checkpoint saved by a TF1 training with Adam also holds enc_w0/Adam, enc_w0/Adam_1, …:
    only enc_w<i> count as layers."""
    t = _tf1_tensors(ARCH)
    slots = {f"{k}/{s}": np.zeros_like(v) for k, v in t.items() for s in ("Adam", "Adam_1")}
    _save_tensors(tmp_path / "adam.ckpt", {**t, **slots, "beta1_power": np.float32(0.9)})
    arch, weights = read_tf1_checkpoint(tmp_path / "adam.ckpt", ARCH.image_shape)
    assert arch == ARCH
    np.testing.assert_array_equal(weights["enc_0"][0], t["enc_w0"])
    np.testing.assert_array_equal(weights["dec_2"][1], t["Variable_5"])


def test_tf1_checkpoint_named_by_its_meta_file(tmp_path):
    """TF1 Savers also write model.ckpt.meta; naming it stands for the prefix, as .index and
    .data-* do."""
    t = _tf1_tensors(ARCH)
    _save_tensors(tmp_path / "m.ckpt", t)
    arch, weights = read_tf1_checkpoint(f"{tmp_path / 'm.ckpt'}.meta", ARCH.image_shape)
    assert arch == ARCH
    np.testing.assert_array_equal(weights["dec_0"][0], t["dec_w0"])


def test_tf1_checkpoint_of_another_model(tmp_path):
    """A checkpoint with no enc_w* at all (another model): 'lacks tensors ['enc_w0']', not an
    empty architecture's error."""
    _save_tensors(tmp_path / "other.ckpt", {"dense/kernel": np.zeros((3, 3), np.float32)})
    with pytest.raises(MescError, match=r"lacks tensors \['enc_w0'\].*not a DSC-Net/MESC"):
        read_tf1_checkpoint(tmp_path / "other.ckpt", (32, 32))


def test_h5_extra_layer_is_refused(saved):
    """A layer the architecture does not have (a damaged or hand-edited file) is refused, not
    silently dropped."""
    _, path = saved
    with h5py.File(path, "a") as f:
        f["enc_3/kernel"] = np.zeros((3, 3, 5, 5), np.float32)
        f["enc_3/bias"] = np.zeros(5, np.float32)
    with pytest.raises(MescError, match="holds layers .*enc_3.* needs"):
        load_autoencoder(path, ARCH)


@pytest.mark.parametrize("damage", ["no architecture", "architecture without channels",
                                    "architecture with an even kernel"])
def test_h5_without_its_architecture_is_damaged(saved, damage):
    """A file whose architecture attribute is missing, lacks a field or is not a valid
    architecture: one MescError naming the file as damaged, not a KeyError traceback."""
    _, path = saved
    with h5py.File(path, "a") as f:
        if damage == "no architecture":
            del f.attrs["architecture"]
        elif damage == "architecture without channels":
            f.attrs["architecture"] = json.dumps({"image_shape": [32, 32], "kernels": [3, 3, 3]})
        else:
            f.attrs["architecture"] = json.dumps({"image_shape": [32, 32], "kernels": [4],
                                                  "channels": [15]})
    message = expect_error("is damaged", load_autoencoder, path)
    assert message.startswith(str(path))


@pytest.mark.parametrize("attr,value,match", [
    ("version", np.array([1, 1]), "format version \\[1, 1\\], but this mesc-tf reads"),
    ("format", np.array([b"mesc-tf-autoencoder"] * 2), "is not a mesc-tf auto-encoder file"),
    ("metadata", "[1, 2]", "is damaged \\(its metadata is a list, not a dict\\)"),
])
def test_h5_attributes_of_another_kind_are_refused(saved, attr, value, match):
    """A hand-edited or damaged attribute of another kind (an array where one value belongs,
    metadata that is not a dict): one MescError, not numpy's "truth value of an array"
    ValueError, nor metadata that breaks its readers' .get() later."""
    _, path = saved
    with h5py.File(path, "a") as f:
        f.attrs[attr] = value
    expect_error(match, load_autoencoder, path, ARCH)


def test_h5_older_format_version_is_refused(saved):
    """Version 0 (not this reader's) is refused as 99 is."""
    _, path = saved
    with h5py.File(path, "a") as f:
        f.attrs["version"] = 0
    with pytest.raises(MescError, match="format version 0, but this mesc-tf reads version 1"):
        load_autoencoder(path)


def test_h5_save_is_atomic(saved, monkeypatch):
    """Overwriting an auto-encoder file (pretrain.py over pretrained/<ds>.h5) goes through a
    temporary file: a failed write keeps the old file whole and leaves nothing."""
    ae, path = saved
    before = path.read_bytes()
    for layer in ae.named_layers:
        layer.kernel.assign(layer.kernel + 1.0)

    def crash(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(MescError, match="the disk is full"):
        save_autoencoder(ae, path, {"dataset": "orl"})
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == ["ae.h5"]


@pytest.mark.parametrize("case, match", [
    ("not an auto-encoder", "needs a mesc_tf.model.ConvAutoEncoder, got str"),
    ("the fine-tuning model", "got MESCNet \\(this model's auto-encoder is its .autoencoder\\)"),
    ("not built", "no weights yet; build it first"),
    ("NaN weights", "NaN or infinite values"),
    ("path of another type", "path must be a path \\(a str or pathlib.Path\\), got int 5"),
    ("metadata not a dict", "metadata must be a dict or None, got list"),
    ("path of a folder", "path .* is a folder; give a file name, e.g. .*autoencoder.h5"),
    ("metadata not JSON", "metadata cannot be written as JSON"),
])
def test_save_autoencoder_refuses_bad_arguments_and_writes_nothing(tmp_path, case, match):
    """Everything is checked before the file is opened: a refused save leaves the old file as
    it was (and no temporary beside it). NaN weights would be refused on loading, so they
    are not written."""
    from mesc_tf.config import Settings
    from mesc_tf.model import MESCNet

    ae = ConvAutoEncoder(ARCH).build_for_input()
    path = save_autoencoder(ae, tmp_path / "ae.h5")
    before = path.read_bytes()
    args = {"autoencoder": ae, "path": path, "metadata": None}
    if case == "not an auto-encoder":
        args["autoencoder"] = "ae"
    elif case == "the fine-tuning model":
        args["autoencoder"] = MESCNet(ae, 4, Settings())
    elif case == "not built":
        args["autoencoder"] = ConvAutoEncoder(ARCH)
    elif case == "NaN weights":
        layer = ae.named_layers[-1]
        layer.bias.assign(np.full(layer.bias.shape, np.nan, np.float32))
    elif case == "path of another type":
        args["path"] = 5
    elif case == "path of a folder":
        args["path"] = tmp_path
    elif case == "metadata not a dict":
        args["metadata"] = [1]
    else:
        args["metadata"] = {"when": object()}
    expect_error(match, save_autoencoder, **args)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["ae.h5"]


def test_paths_of_another_type_are_refused_in_one_line(saved):
    """load_autoencoder and load_dataset name the argument instead of pathlib's TypeError."""
    expect_error("auto-encoder file must be a path .*got int 3", load_autoencoder, 3)
    expect_error("data_dir must be a path .*got list", data.load_dataset, "orl", ["data"])


def test_h5_save_makes_its_folder(tmp_path):
    """save_autoencoder writes into a folder that does not exist yet."""
    ae = ConvAutoEncoder(ARCH).build_for_input()
    path = save_autoencoder(ae, tmp_path / "new" / "deeper" / "ae.h5")
    assert read_autoencoder_file(path)[0] == ARCH


def test_a_file_where_the_folder_should_be_is_one_error(tmp_path, synthetic_tf1):
    """A file in the way of the folder to be made was pathlib's FileExistsError; a metadata
    that is no dict was a TypeError from the converter."""
    from mesc_tf.files import save_npy

    ae = ConvAutoEncoder(ARCH).build_for_input()
    (tmp_path / "f.h5").write_bytes(b"")
    expect_error(r"cannot write .*f\.h5/ae\.h5 .*writable", save_autoencoder, ae,
                 tmp_path / "f.h5" / "ae.h5")
    expect_error(r"cannot write .*f\.h5/C\.npy", save_npy, tmp_path / "f.h5" / "C.npy",
                 np.zeros(2))
    expect_error("metadata must be a dict or None, got list", convert_tf1_checkpoint,
                 synthetic_tf1["orl"], get_config("orl").arch.image_shape, tmp_path / "c.h5",
                 metadata=[1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.h5"]


# --- review of session 65: where an auto-encoder is found ------------------------------------


def test_resolving_weights_checks_the_argument_and_the_file(saved, monkeypatch):
    """weights=5 was pathlib's TypeError; a file this user may not read was a PermissionError
    from hashing it, before anything else read it."""
    import errno

    from mesc_tf import files
    from mesc_tf.sources import resolve_autoencoder

    expect_error("weights must be a path .*got int 5", resolve_autoencoder, "orl", weights=5)

    def denied(path, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(files, "open", denied, raising=False)  # found before the builtin
    msg = expect_error("cannot read .*Permission denied.*make it readable", resolve_autoencoder,
                       "orl", weights=saved[1])
    assert str(saved[1]) in msg


def test_a_checkpoint_prefix_may_hold_glob_characters(synthetic_tf1, tmp_path):
    """orl[v1].ckpt was "not found": its name went into a glob pattern unescaped."""
    import shutil

    from mesc_tf.sources import resolve_autoencoder

    prefix = synthetic_tf1["orl"]
    for f in prefix.parent.glob(f"{prefix.name}.*"):
        shutil.copy(f, tmp_path / f.name.replace(prefix.name, "orl[v1].ckpt"))
    spec = resolve_autoencoder("orl", tf1_checkpoint=str(tmp_path / "orl[v1].ckpt"))
    assert spec.kind == "tf1" and spec.sha256 == resolve_autoencoder(
        "orl", tf1_checkpoint=str(prefix)).sha256


def test_dataset_names_are_read_in_any_case_and_an_empty_tf1_dir_is_unset(
        saved, synthetic_tf1_dir, tmp_path, monkeypatch):
    """get_config and load_dataset take "ORL"; the auto-encoder lookups did not. An empty
    MESC_TF1_DIR meant the current folder (MESC_DATA_DIR and MESC_PRETRAINED_DIR: unset)."""
    import shutil

    from mesc_tf.sources import resolve_autoencoder
    from mesc_tf.weights import default_tf1_dir, tf1_prefix

    shutil.copy(saved[1], tmp_path / "orl.h5")
    monkeypatch.setenv("MESC_PRETRAINED_DIR", str(tmp_path))
    assert resolve_autoencoder("ORL").path == str(tmp_path / "orl.h5")
    monkeypatch.setenv("MESC_TF1_DIR", str(synthetic_tf1_dir))
    assert tf1_prefix("ORL", "original") == tf1_prefix("orl", "original")
    monkeypatch.delenv("MESC_TF1_DIR")
    unset = default_tf1_dir()
    monkeypatch.setenv("MESC_TF1_DIR", "")
    assert default_tf1_dir() == unset != Path(".")


def test_metadata_may_hold_any_numpy_scalar(tmp_path):
    """np.bool_ was refused ("not JSON serialisable: bool"), though NumPy scalars were said
    to be handled."""
    ae = ConvAutoEncoder(ARCH).build_for_input()
    path = save_autoencoder(ae, tmp_path / "ae.h5", {"converged": np.bool_(True),
                                                     "error": np.float32(0.5)})
    assert load_autoencoder(path)[1]["converged"] is True


def test_a_tf1_checkpoints_identity_covers_its_weights_not_only_its_index(synthetic_tf1,
                                                                          tmp_path):
    """Resuming, sweep records, table cells and the C cache tell auto-encoders apart by this
    hash: one byte of other weights in the .data file is another auto-encoder."""
    import shutil

    from mesc_tf import sources

    src = synthetic_tf1["orl"]
    for f in src.parent.glob(f"{src.name}.*"):
        shutil.copy(f, tmp_path / f.name)
    prefix = tmp_path / src.name
    before = sources.resolve_autoencoder("orl", tf1_checkpoint=str(prefix)).ident
    (data_file,) = tmp_path.glob(f"{src.name}.data-*")
    raw = bytearray(data_file.read_bytes())
    raw[len(raw) // 2] ^= 1
    data_file.write_bytes(bytes(raw))
    assert sources.resolve_autoencoder("orl", tf1_checkpoint=str(prefix)).ident != before
