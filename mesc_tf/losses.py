"""The loss terms, with the released code's constants (reference-facts §2.4, §2.5).

All terms are sums over elements, not means: with Adam the scale only matters through ε and
through the relative weights, and keeping sums keeps the released constants meaningful.

    loss = recon_scale · Σ(x_r − x)²  +  reg1 · R(C)  +  reg2 · ½ Σ(Z − C·Z)²

where R is one of the regularisers below. MESC's entropy carries a ½ (as coded); DSC-Net's
Frobenius term does not. The paper's λ are the code's reg / 4 (config.paper_lambdas).
"""

import tensorflow as tf

# Lower bound of the log's argument in the entropy term, as in the paper and the code.
LOG_CLIP_MIN = 1e-12


def reconstruction(x, x_rec, scale=1.0):
    """scale · Σ(x_r − x)². MESC: scale 1; DSC-Net ORL/EYaleB: ½."""
    return scale * tf.reduce_sum(tf.square(x_rec - x))


def self_expression(z, cz):
    """½ Σ(Z − C·Z)² over the flattened latent codes (rows = samples)."""
    return 0.5 * tf.reduce_sum(tf.square(z - cz))


def entropy(c):
    """½ Σ C·ln(clip(C, 1e-12, 1)): the negative entropy of C, to be minimised.

    The clip sits inside the log only: the multiplier is the unclipped C, so the gradient is
    ½(ln C + 1) on [1e-12, 1] (TF's clip passes the gradient at its bounds), 0 above 1 and
    ½·ln(1e-12) below 1e-12 (negative entries are pushed up linearly). This is exactly the
    released graph.
    """
    return _entropy(tf.convert_to_tensor(c))  # read a variable here: the gradient flows to it


# The two n×n passes below are compiled by XLA even when the step is not (a nested jit_compile
# function): XLA fuses clip, log, product and mask into one loop, where TF runs ~6 kernels that
# each write an n×n temporary (400 MB for MNIST's C). The forward pass sums each row in that
# loop and leaves the n row sums to TF's reduce_sum (XLA's CPU reductions of a whole matrix run
# on one thread). On MNIST-10k this makes the term ~2x faster, and no n×n tensor is written by
# the forward pass or kept from it to the backward one.
@tf.function(jit_compile=True, autograph=False)
def _entropy_row_sums(c):
    """Σ_j C_ij·ln(clip(C_ij)) for each row i."""
    return tf.reduce_sum(c * tf.math.log(tf.clip_by_value(c, LOG_CLIP_MIN, 1.0)), axis=1)


@tf.function(jit_compile=True, autograph=False)
def _entropy_grad(c, dy):
    """½·dy·(ln(clip(C)) + [1e-12 ≤ C ≤ 1]).

    The second term is C·(1/clip(C)) gated as tf.clip_by_value's gradient is, i.e. C/C = 1 where
    the gate is open (autodiff's C·(1/C) can round to one ulp below 1; ln C + 1 is exact)."""
    gate = tf.cast(tf.logical_and(c >= LOG_CLIP_MIN, c <= 1.0), c.dtype)
    return (0.5 * dy) * (tf.math.log(tf.clip_by_value(c, LOG_CLIP_MIN, 1.0)) + gate)


# The tf.function around the custom gradient matters: traced inside the training step, a bare
# tf.custom_gradient registers its backward closure in TF's global gradient registry for good,
# and through ``c`` that keeps the step's graph and every variable it captures (MNIST: C and
# both Adam slots, 1.2 GB) alive after training. In its own function the closure holds only
# that small graph.
@tf.function(autograph=False)
@tf.custom_gradient
def _entropy(c):
    """``entropy`` with its gradient written out and recomputed from C in the backward pass."""
    return 0.5 * tf.reduce_sum(_entropy_row_sums(c)), lambda dy: _entropy_grad(c, dy)


def l1(c):
    """Σ|C| (DSC-Net-L1, DSLSP-L1)."""
    return tf.reduce_sum(tf.abs(c))


def l2(c):
    """Σ C², the squared Frobenius norm (DSC-Net-L2)."""
    return tf.reduce_sum(tf.square(c))


def nuclear(c):
    """‖C‖_*, the sum of singular values (DSC-Net with the nuclear norm)."""
    return tf.reduce_sum(tf.linalg.svd(c, compute_uv=False))


REGULARIZERS = {"entropy": entropy, "l1": l1, "l2": l2, "nuclear": nuclear}
