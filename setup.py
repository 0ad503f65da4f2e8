from pathlib import Path

from setuptools import find_packages, setup

setup(
    name="mesc-tf",
    version="0.1.0",
    description="MESC-Net (Maximum Entropy Subspace Clustering Network) and DSC-Net baselines "
                "in TensorFlow 2 / Keras 3, faithful to the released code",
    long_description=(Path(__file__).parent / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["mesc_tf", "mesc_tf.*"]),
    python_requires=">=3.11",  # scikit-learn 1.9 needs it
    install_requires=[
        "tensorflow>=2.16",
        "keras>=3",
        "tensorboard",  # the TensorBoard callback; TF 2.21 wheels no longer depend on it
        "numpy",
        "scipy",
        "scikit-learn>=1.9",  # the fast spectral step reproduces 1.9's shift-invert
        "munkres",
        "h5py",
        "matplotlib",
        "joblib",
        "threadpoolctl",  # BLAS thread limits (it comes with scikit-learn)
    ],
    extras_require={"test": ["pytest", "pytest-xdist"]},
)
