"""The RoPE cos/sin cache of `Sapiens2RopePositionEmbedding`: bit-equal to recomputing (same process), invalidated
whenever the periods change, bypassed where caching would be wrong (augmented coordinates, tracing, compiling), and
free of autograd history in training."""

import copy

import pytest
import torch

import sapiens2_hf
from sapiens2_hf.modeling.modeling_sapiens2_hf import Sapiens2RopePositionEmbedding
from sapiens2_hf.modeling.official_format_sapiens2_hf import compute_rope_periods

pytestmark = pytest.mark.usefixtures("one_thread")


def _model(**overrides) -> sapiens2_hf.Sapiens2Model:
    torch.manual_seed(0)
    return sapiens2_hf.Sapiens2Model(sapiens2_hf.tiny_config(**overrides)).eval()


def _assert_fresh(rope: Sapiens2RopePositionEmbedding, grid=(4, 3)) -> None:
    """What `forward` returns (possibly cached) equals a recomputation from the current periods, bit for bit."""
    cos, sin = rope(*grid)
    fresh_cos, fresh_sin = rope.compute_cos_sin(*grid)
    assert torch.equal(cos, fresh_cos) and torch.equal(sin, fresh_sin)


class _StaleRope(Sapiens2RopePositionEmbedding):
    """Broken control: a cache keyed on the grid only, never invalidated."""

    def forward(self, num_patches_h, num_patches_w):
        key = (num_patches_h, num_patches_w)
        if key not in self._cos_sin_cache:
            self._cos_sin_cache[key] = self.compute_cos_sin(num_patches_h, num_patches_w)
        return self._cos_sin_cache[key]


@pytest.mark.parametrize("rope_dtype", ["bfloat16", "float32"])
def test_cached_outputs_bit_equal_to_recomputed(rope_dtype):
    model = _model(rope_dtype=rope_dtype)
    rope = model.rope_embeddings
    pixel_values = torch.randn(2, 3, 64, 48)
    with torch.no_grad():
        first = model(pixel_values).last_hidden_state
        cos, sin = rope(4, 3)
        assert rope(4, 3)[0] is cos  # a cache hit: the very same tensors come back
        second = model(pixel_values).last_hidden_state
        keep = torch.tensor([[0, 2, 5, 7], [1, 3, 4, 11]])
        kept_cached = model(pixel_values, patch_keep_indices=keep).last_hidden_state
        rope.max_cached_grids = 0  # cache off: every call recomputes
        assert rope(4, 3)[0] is not cos
        recomputed = model(pixel_values).last_hidden_state
        kept_recomputed = model(pixel_values, patch_keep_indices=keep).last_hidden_state
    assert torch.equal(first, second) and torch.equal(first, recomputed)
    assert torch.equal(kept_cached, kept_recomputed)
    assert (first - recomputed).abs().max().item() == 0.0
    assert "periods" not in model.state_dict() and not any("cache" in key for key in model.state_dict())


def _load_periods(rope: Sapiens2RopePositionEmbedding, periods: torch.Tensor) -> None:
    """Loads `periods` with `load_state_dict`. Our state dicts do not carry the buffer (it is recomputed), but some
    exported checkpoints do; making it persistent for the call runs torch's own loading path (an in-place `copy_`)."""
    rope._non_persistent_buffers_set.discard("periods")
    try:
        rope.load_state_dict({"periods": periods})
    finally:
        rope._non_persistent_buffers_set.add("periods")


@pytest.mark.parametrize("rope_class", [Sapiens2RopePositionEmbedding, _StaleRope])
def test_cache_follows_every_change_of_the_periods(rope_class):
    config = sapiens2_hf.tiny_config()
    rope = rope_class(config)
    head_dim = rope.head_dim

    def changes():
        yield "load_state_dict", lambda: _load_periods(rope, compute_rope_periods(head_dim, 1000.0, rope.rope_dtype))
        yield "in-place", lambda: rope.periods.mul_(2)
        yield "data", lambda: setattr(rope.periods, "data", rope.periods.detach() * 3)
        yield "dtype", lambda: rope.to(torch.float64)
        yield "reset", lambda: (setattr(rope.config, "rope_theta", 50.0), rope.reset_periods())

    failures = []
    for name, change in changes():
        before = rope(4, 3)[0].clone()
        change()
        try:
            _assert_fresh(rope)
            assert not torch.equal(rope(4, 3)[0], before), f"{name} did not change the periods"
        except AssertionError:
            failures.append(name)
    if rope_class is _StaleRope:
        # The control must be caught by the very checks above (reset_periods clears even this cache).
        assert set(failures) >= {"load_state_dict", "in-place", "data", "dtype"}, failures
    else:
        assert failures == []


def test_cache_is_copied_consistently_and_bounded():
    rope = _model().rope_embeddings
    for size in range(1, 12):
        rope(size, size + 1)
    assert len(rope._cos_sin_cache) == rope.max_cached_grids
    grids = {key[:2] for key in rope._cos_sin_cache}
    assert (11, 12) in grids and (1, 2) not in grids  # the least recently used grid went first
    copied = copy.deepcopy(rope)
    copied.periods.mul_(2)  # the copy's own periods: its cache must follow them, the original's must not move
    _assert_fresh(copied, (11, 12))
    _assert_fresh(rope, (11, 12))
    assert not torch.equal(copied(11, 12)[0], rope(11, 12)[0])


def test_training_with_grads_matches_recomputation_and_keeps_no_history():
    cached, uncached = _model(), _model()
    uncached.rope_embeddings.max_cached_grids = 0
    pixel_values = torch.randn(2, 3, 64, 48)
    with torch.inference_mode():  # a pipeline call before fine-tuning: its tensors must not leak into training
        cached(pixel_values)
    losses = {}
    for name, model in (("cached", cached), ("uncached", uncached)):
        model.train()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        losses[name] = []
        for _ in range(3):
            optimizer.zero_grad()
            loss = model(pixel_values).last_hidden_state.square().mean()
            loss.backward()  # a second step through a cos/sin carrying history would fail here
            optimizer.step()
            losses[name].append(loss.item())
            cos, sin = model.rope_embeddings(4, 3)
            assert not cos.requires_grad and cos.grad_fn is None and sin.grad_fn is None
    assert losses["cached"] == losses["uncached"]
    for (name, a), b in zip(cached.named_parameters(), uncached.parameters()):
        assert torch.equal(a, b), name
    assert any(not key[-1] for key in cached.rope_embeddings._cos_sin_cache)  # training used a non-inference entry


def test_cache_bypassed_for_augmented_coordinates_and_tracing(monkeypatch):
    jittered = _model(pos_embed_jitter=2.0).train()
    torch.manual_seed(1)
    first = jittered.rope_embeddings(4, 3)[0]
    assert not torch.equal(jittered.rope_embeddings(4, 3)[0], first)  # fresh random coordinates every call
    assert jittered.rope_embeddings._cos_sin_cache == {}

    model = _model()
    pixel_values = torch.randn(1, 3, 64, 48)
    torch.jit.trace(model, pixel_values, strict=False, check_trace=False)
    assert model.rope_embeddings._cos_sin_cache == {}  # a traced graph would freeze one grid's tensors as constants
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    model.rope_embeddings(4, 3)
    assert model.rope_embeddings._cos_sin_cache == {}
