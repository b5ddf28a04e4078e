"""posenc.KVCacheBatch: a batch of sequences of different lengths, left-padded
as Hugging Face's batched generate() pads them, equals each sequence alone
through its own posenc.KVCache (to the bit); errors name the row and change
no row."""

import numpy as np
import pytest

import posenc

HEAD_DIM, KV_HEADS, HEADS = 16, 2, 4
ROPE = posenc.Rope.default(HEAD_DIM, 10000.0)


def normal(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def step(lengths, starts, n, seed):
    """[batch, n] tensors with row b's last lengths[b] tokens real, at
    positions starts[b] + 0, 1, ...; pads at position 1 (never read)."""
    batch = len(lengths)
    mask = np.zeros((batch, n), dtype=np.int64)  # an int attention_mask
    positions = np.ones((batch, n), dtype=np.int64)
    for b, (length, start) in enumerate(zip(lengths, starts)):
        if length:
            mask[b, n - length :] = 1
            positions[b, n - length :] = start + np.arange(length)
    q = normal(batch, n, HEADS, HEAD_DIM, seed=seed)
    k = normal(batch, n, KV_HEADS, HEAD_DIM, seed=seed + 1)
    v = normal(batch, n, KV_HEADS, HEAD_DIM, seed=seed + 2)
    return positions, mask, q, k, v


def run(batch_cache, alone, expected_positions, lengths, starts, n, seed):
    positions, mask, q, k, v = step(lengths, starts, n, seed)
    batch_cache.append(positions, mask, k, v)
    out = batch_cache.attend(q, positions, mask, causal=True)
    for b, length in enumerate(lengths):
        real = slice(n - length, n)
        np.testing.assert_array_equal(out[b, : n - length], 0)
        if length:
            alone[b].append(positions[b, real], k[b, real], v[b, real])
            expected = alone[b].attend(q[b, real], positions[b, real], causal=True)
            np.testing.assert_array_equal(out[b, real], expected)
            expected_positions[b] += positions[b, real].tolist()
        assert batch_cache.positions(b) == expected_positions[b]
    assert batch_cache.sizes == [len(a) for a in alone]


def test_left_padded_prefill_and_decode_equal_each_sequence_alone():
    lengths = [5, 9, 2]
    batch_cache = posenc.KVCacheBatch(3, 16, KV_HEADS, HEAD_DIM, rope=ROPE)
    alone = [posenc.KVCache(16, KV_HEADS, HEAD_DIM, rope=ROPE) for _ in lengths]
    cached = [[], [], []]
    run(batch_cache, alone, cached, lengths, [0, 0, 0], 9, 10)
    starts = list(lengths)
    for i in range(4):
        run(batch_cache, alone, cached, [1, 1, 1], starts, 1, 100 + 10 * i)
        starts = [s + 1 for s in starts]
    run(batch_cache, alone, cached, [1, 0, 1], starts, 1, 200)  # row 1 finished
    assert batch_cache.sizes == [10, 13, 7]
    assert cached[1] == list(range(13))


def test_bad_input_names_the_row_and_changes_no_row():
    c = posenc.KVCacheBatch(2, 16, KV_HEADS, HEAD_DIM, rope=ROPE)
    c.append(*step([3, 14], [0, 0], 14, 1)[:2], *step([3, 14], [0, 0], 14, 1)[3:])
    positions, mask, q, k, v = step([3, 3], [3, 14], 3, 2)
    with pytest.raises(posenc.Error, match=r"free slots .* got 3 \(row 1\)"):
        c.append(positions, mask, k, v)
    assert c.sizes == [3, 14]
    holes = mask.copy()
    holes[0] = [1, 0, 1]
    with pytest.raises(posenc.Error, match=r"mask\[0\] must hold one run"):
        c.append(positions, holes, k, v)
    with pytest.raises(posenc.Error, match="mask must be a bool or integer"):
        c.append(positions, mask.astype(np.float32), k, v)
    with pytest.raises(posenc.Error, match=r"k.shape must be \[batch = 2"):
        c.append(positions, mask, k[:1], v[:1])
    with pytest.raises(posenc.Error, match=r"positions.shape must be"):
        c.append(positions[:, :2], mask, k, v)
    with pytest.raises(posenc.Error, match="batch must be in"):
        posenc.KVCacheBatch(0, 16, KV_HEADS, HEAD_DIM)
    assert c.sizes == [3, 14]


def test_torch_batch_decode_equals_each_sequence_alone():
    import torch

    import posenc.torch as pt

    lengths = [5, 9, 2]
    batch_cache = pt.KVCacheBatch(3, 16, KV_HEADS, HEAD_DIM, rope=ROPE)
    alone = [pt.KVCache(16, KV_HEADS, HEAD_DIM, rope=ROPE) for _ in lengths]
    with torch.no_grad():
        for n, live, seed in [(9, lengths, 10), (1, [1, 1, 1], 20), (1, [1, 0, 1], 30)]:
            _, mask, q, k, v = (torch.from_numpy(x) for x in step(live, [0, 0, 0], n, seed))
            # Default positions: each row continues (cumsum of the mask - 1 for a prompt).
            batch_cache.append(k, v, mask=mask)
            out = batch_cache.attend(q, mask=mask)
            for b, length in enumerate(live):
                real = slice(n - length, n)
                assert bool((out[b, : n - length] == 0).all())
                if length:
                    pos = batch_cache.positions(b)[-length:]
                    alone[b].append(k[b, real], v[b, real], pos)
                    assert torch.equal(out[b, real], alone[b].attend(q[b, real], pos))
    assert batch_cache.sizes == [7, 10, 4]
    assert batch_cache.positions(1).tolist() == list(range(10))
    assert batch_cache.positions(0).tolist() == list(range(7))
    with pytest.raises(posenc.Error, match="mask must be a bool or integer"):
        batch_cache.append(k, v, mask=mask.float())
