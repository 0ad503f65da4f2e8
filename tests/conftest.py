"""Shared test fixtures: where the shared data and the authors' TF1 checkpoints live, a
seeded, deterministic TF runtime for the tests that train, and the README's examples run as
written."""

import os
import re
from pathlib import Path

import pytest

# Before TensorFlow is first imported anywhere in the session.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from mesc_tf.weights import ORIGINAL_CHECKPOINTS  # noqa: E402

# ../shared beside the checkout, or MESC_SHARED_DIR (a clone elsewhere, e.g. a reviewer's).
SHARED = Path(os.environ.get("MESC_SHARED_DIR")
              or Path(__file__).resolve().parents[2] / "shared").resolve()

# The seven released auto-encoders (Toy shares COIL20's), relative to shared/pretrained-tf1.
TF1_CHECKPOINTS = {k: v for k, v in ORIGINAL_CHECKPOINTS.items() if k != "toy"}


# .ci/run sets it where ../shared exists: a file missing from it then fails the tests that need
# it instead of skipping them unseen.
REQUIRE_SHARED = os.environ.get("MESC_REQUIRE_SHARED") == "1"


def pytest_configure(config):
    # Keras 3's callbacks (ReduceLROnPlateau, save/load_weights) call np.array() on TF variables,
    # whose __array__ predates NumPy 2's copy keyword: one warning per call, none of ours.
    config.addinivalue_line(
        "filterwarnings",
        "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning")
    # TensorFlow's autograph (through gast) on Python 3.13: one warning per converted function.
    config.addinivalue_line(
        "filterwarnings",
        r"ignore:\w+\.__init__ got an unexpected keyword argument '___pyct_anno'"
        ":DeprecationWarning")


def _existing(path: Path, what: str) -> Path:
    if not path.exists():
        if REQUIRE_SHARED:
            pytest.fail(f"{what} not found at {path} (MESC_REQUIRE_SHARED=1)")
        pytest.skip(f"{what} not found at {path}")
    return path


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The shared folder (data, checkpoints, reference numbers): SHARED."""
    return _existing(SHARED, "shared folder")


@pytest.fixture(scope="session")
def shared_data(shared_dir) -> Path:
    return _existing(shared_dir / "data", "shared data folder")


@pytest.fixture
def readme_example(shared_data, monkeypatch):
    """``run(marker)``: runs the first python block after ``marker`` in README.md as written,
    from the repository root with the shared data, and returns (its code, its namespace).
    ``replace`` {old: new} shortens a run the test says it shortens (each ``old`` must occur)."""
    repo = Path(__file__).resolve().parents[1]

    def run(marker, replace=None):
        monkeypatch.setenv("MESC_DATA_DIR", str(shared_data))
        monkeypatch.chdir(repo)  # the examples load pretrained/*.h5
        text = (repo / "README.md").read_text()
        code = re.search(r"```python\n(.*?)```", text[text.index(marker):], re.S)[1]
        for old, new in (replace or {}).items():
            assert old in code, f"the README example has no {old!r}"
            code = code.replace(old, new)
        scope = {}
        exec(compile(code, "README.md", "exec"), scope)
        return code, scope

    return run


@pytest.fixture(scope="session")
def shared_reference(shared_dir) -> Path:
    return _existing(shared_dir / "reference", "reference numbers folder")


@pytest.fixture(scope="session")
def tf1_ckpts(shared_dir) -> dict:
    """dataset name → TF1 checkpoint prefix (without .index / .data-*)."""
    root = _existing(shared_dir / "pretrained-tf1", "TF1 checkpoint folder")
    prefixes = {name: root / rel for name, rel in TF1_CHECKPOINTS.items()}
    for name, prefix in prefixes.items():
        _existing(Path(f"{prefix}.index"), f"{name} TF1 checkpoint")
    return prefixes


@pytest.fixture(scope="session")
def synthetic_tf1_dir(tmp_path_factory) -> Path:
    """A folder laid out as shared/pretrained-tf1 (for MESC_TF1_DIR), of random weights."""
    from synthetic import write_tf1_dir

    root = tmp_path_factory.mktemp("tf1")
    write_tf1_dir(root)
    return root


@pytest.fixture(scope="session")
def synthetic_tf1(synthetic_tf1_dir) -> dict:
    """As ``tf1_ckpts``, but random weights at the same places under a temporary folder: for
    tests that need a checkpoint of the right form, not the authors' numbers."""
    return {name: synthetic_tf1_dir / rel for name, rel in ORIGINAL_CHECKPOINTS.items()}


@pytest.fixture(scope="session")
def synthetic_data(tmp_path_factory) -> Path:
    """A data folder with random ORL and COIL20 (hence Toy) files of the real shapes."""
    from synthetic import write_data_dir

    return write_data_dir(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="session")
def runtime():
    """Seed everything once and switch on deterministic float32 (configure_runtime(0))."""
    from mesc_tf.training import configure_runtime

    configure_runtime(0)


@pytest.fixture(scope="session")
def tensorboard_scalars():
    """A function: the scalars of the TensorBoard event files under a folder, as
    {run (subfolder): {tag: [steps]}}."""
    import tensorflow as tf
    from tensorflow.core.util import event_pb2

    def read(log_dir):
        out = {}
        for path in sorted(Path(log_dir).rglob("events.out.tfevents.*")):
            tags = out.setdefault(path.parent.name, {})
            for record in tf.data.TFRecordDataset(str(path)):
                event = event_pb2.Event.FromString(record.numpy())
                for value in event.summary.value:
                    tags.setdefault(value.tag, []).append(event.step)
        return out

    return read
