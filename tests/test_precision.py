"""jspec.models.precision: the float32-accumulated einsum's gradient runs in the operands' dtype (no upcast of a
bfloat16 weight in the backward pass) and equals the plain gradient for float32 operands; parameter casting."""

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

from jspec.models.precision import cast_params, einsum_f32

SPEC = "mjh,vh->mjv"  # the LM head's logits


def _operands(dtype):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(3, 4, 16)), dtype)
    w = jnp.asarray(rng.normal(size=(40, 16)), dtype)
    probe = jnp.asarray(rng.normal(size=(3, 4, 40)), jnp.float32)
    return x, w, probe


def _loss(f):
    return lambda x, w, probe: jnp.sum(jnp.sin(f(x, w)) * probe)


def test_float32_operands_give_the_plain_value_and_gradient():
    x, w, probe = _operands(jnp.float32)
    plain = lambda x, w: jnp.einsum(SPEC, x, w, preferred_element_type=jnp.float32)  # noqa: E731
    mixed = lambda x, w: einsum_f32(SPEC, x, w)  # noqa: E731
    np.testing.assert_array_equal(mixed(x, w), plain(x, w))
    got = jax.grad(_loss(mixed), argnums=(0, 1))(x, w, probe)
    want = jax.grad(_loss(plain), argnums=(0, 1))(x, w, probe)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-6, atol=1e-6)


def test_bfloat16_gradient_stays_in_bfloat16_and_tracks_float32():
    x, w, probe = _operands(jnp.bfloat16)
    loss = _loss(lambda x, w: einsum_f32(SPEC, x, w))
    assert einsum_f32(SPEC, x, w).dtype == jnp.float32
    grads = jax.grad(loss, argnums=(0, 1))(x, w, probe)
    assert [g.dtype for g in grads] == [jnp.bfloat16, jnp.bfloat16]
    want = jax.grad(loss, argnums=(0, 1))(x.astype(jnp.float32), w.astype(jnp.float32), probe)
    for g, r in zip(grads, want):
        scale = float(jnp.max(jnp.abs(r)))
        np.testing.assert_allclose(np.asarray(g, np.float32), r, atol=0.02 * scale, rtol=0)
    # Every product of the backward pass takes bfloat16 operands: nothing upcasts the weight.
    jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(x, w, probe)
    dots = [e for e in _equations(jaxpr.jaxpr) if e.primitive.name == "dot_general"]
    assert len(dots) == 3  # forward, dx, dw
    assert all(v.aval.dtype == jnp.bfloat16 for e in dots for v in e.invars), [e.invars for e in dots]


def _equations(jaxpr):
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            yield from _equations(sub)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_cast_params_casts_floating_leaves_only(dtype):
    tree = {"w": jnp.ones((2, 2), jnp.float32), "ids": jnp.arange(3), "nested": [jnp.zeros(2, jnp.float32)]}
    out = cast_params(tree, dtype)
    assert out["w"].dtype == jnp.dtype(dtype) and out["nested"][0].dtype == jnp.dtype(dtype)
    assert out["ids"].dtype == tree["ids"].dtype
