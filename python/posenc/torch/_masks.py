"""Attention masks as posenc's kernel takes them: one interval of keys per query.

Two forms of Hugging Face's masks are read. The padding mask [*batch, kv_tokens] (1 or True: a
token, 0: padding) hides the same keys from every query. A 4-D mask [*batch, 1 or heads,
q_tokens, kv_tokens] says for each query which keys it sees: boolean (True: seen;
transformers.masking_utils.sdpa_mask) or additive float (0: seen, -inf or the dtype's lowest
value: hidden; eager_mask), the same for every head. Each query's seen keys must be one interval
(causal, padding, sliding-window, chunked and pre-allocated-cache masks all are); the kernel then
runs on that interval, as few calls as the mask allows.

Default positions follow Hugging Face. A padding mask: each token's index among the kept ones of
its row (cumsum - 1), padding 0, as transformers 5.23.0's generate() numbers a padded batch
(4.x gave padding 1). A 4-D mask: a batch row's tokens are the slots from the first to the last
key any query sees, at 0, 1, ...; the other slots (padding, the empty slots of a pre-allocated
cache) are at 0. The queries are the slots of the keys when there are as many of each, else the
last q_tokens tokens (a decode step's queries follow the keys written before them).
"""

import numpy as np
import torch

from posenc.torch._tensors import _dtype_name, _error


def query_key_mask(function, attention_mask, batch_shape, heads, q_tokens, kv_tokens):
    """(seen, per_query): attention_mask as bool [*batch, rows, kv_tokens], rows 1 for a padding
    mask (the same keys for every query, per_query False), q_tokens for a 4-D mask (per_query
    True), whose rows are checked to be intervals."""
    if not isinstance(attention_mask, torch.Tensor):
        attention_mask = torch.as_tensor(attention_mask)
    batch = tuple(batch_shape)
    shape = tuple(attention_mask.shape)
    if attention_mask.dim() == len(batch) + 1:
        if attention_mask.is_floating_point() or attention_mask.is_complex():
            raise _error(
                function,
                "attention_mask",
                "be bool or integer 0/1 when it is a padding mask [*batch, kv_tokens] (an "
                "additive float mask is 4-D: [*batch, 1 or heads, q_tokens, kv_tokens])",
                _dtype_name(attention_mask.dtype),
            )
        if shape != batch + (kv_tokens,):
            raise _error(
                function,
                "attention_mask.shape",
                f"be (*batch, kv_tokens) = {batch + (kv_tokens,)}",
                shape,
            )
        return attention_mask.to(torch.bool).unsqueeze(-2), False
    if attention_mask.dim() != len(batch) + 3:
        raise _error(
            function,
            "attention_mask.shape",
            f"be a padding mask (*batch, kv_tokens) = {batch + (kv_tokens,)} or a 4-D mask "
            f"(*batch, 1 or heads, q_tokens, kv_tokens) = {batch + (1, q_tokens, kv_tokens)}",
            shape,
        )
    if (
        shape[: len(batch)] != batch
        or shape[-3] not in (1, heads)
        or shape[-2:]
        != (
            q_tokens,
            kv_tokens,
        )
    ):
        raise _error(
            function,
            "attention_mask.shape",
            f"be (*batch, 1 or heads, q_tokens, kv_tokens) = {batch + (1, q_tokens, kv_tokens)}"
            f" or {batch + (heads, q_tokens, kv_tokens)}",
            shape,
        )
    seen = _seen(function, attention_mask)
    begin, end, interval = row_intervals(seen)
    if not bool(interval.all()):
        row = _first(~interval)
        keys = torch.nonzero(seen[row]).flatten().tolist()
        raise _error(
            function,
            "attention_mask",
            "let each query see one interval of keys (posenc's kernel takes one per query); "
            "row (*batch, head, query)",
            f"row {row} seeing keys {_shown(keys)}",
        )
    if shape[-3] > 1:
        same = (seen == seen[..., :1, :, :]).all(-1)
        if not bool(same.all()):
            raise _error(
                function,
                "attention_mask",
                "be the same for every head (or have one head: [*batch, 1, q_tokens, "
                "kv_tokens]); row (*batch, head, query)",
                f"row {_first(~same)} unlike head 0's",
            )
    return seen[..., 0, :, :], True


def _seen(function, mask):
    """A 4-D mask as bool: True where a query sees a key."""
    if mask.dtype == torch.bool:
        return mask
    if mask.is_floating_point():
        seen, valid = additive_seen(mask)
        hidden, bad = ~seen, ~valid
        rule = (
            "hold 0 (seen) and -inf or the dtype's lowest value (hidden) only, as an additive "
            "mask (a bias is not a mask)"
        )
    elif mask.is_complex():
        raise _error(function, "attention_mask", "be bool, integer 0/1 or float", "complex")
    else:
        hidden = mask == 0
        bad = ~(hidden | (mask == 1))
        rule = "hold 0 (hidden) and 1 (seen) only, as an integer mask"
    if bool(bad.any()):
        at = _first(bad.any(-1))
        value = mask[at][bad[at]][0].item()
        raise _error(
            function,
            "attention_mask",
            f"{rule}; row (*batch, head, query)",
            f"{value} in row {at}",
        )
    return ~hidden


def additive_seen(mask):
    """(seen, valid) of an additive float mask: seen where it holds 0, valid where it holds 0 or
    hides the key (-inf or the dtype's lowest value; anything else is a bias, not a mask)."""
    seen = mask == 0
    return seen, seen | (mask <= torch.finfo(mask.dtype).min)


def _first(flags):
    """The index tuple of the first True in flags (row-major)."""
    return tuple(int(i) for i in torch.nonzero(flags)[0])


def _shown(keys):
    return keys if len(keys) <= 8 else keys[:4] + ["..."] + keys[-2:]


def row_intervals(seen):
    """(begin, end, interval) over seen [..., kv_tokens]: each row's first seen key and one past
    its last (0, 0 for a row that sees none: end > begin says the row sees a key), and whether
    its seen keys are that interval. The one reading of a mask as key intervals, for
    posenc.torch.attention and posenc.transformers."""
    count = seen.sum(-1)
    kv_tokens = seen.shape[-1]
    if kv_tokens == 0:
        zeros = torch.zeros_like(count)
        return zeros, zeros, torch.ones_like(count, dtype=torch.bool)
    flags = seen.to(torch.uint8)
    begin = flags.argmax(-1)
    end = kv_tokens - flags.flip(-1).argmax(-1)
    empty = count == 0
    begin = begin.masked_fill(empty, 0)
    end = end.masked_fill(empty, 0)
    return begin, end, empty | (end - begin == count)


def mask_positions(seen, per_query, q_tokens):
    """Hugging Face's positions of a masked call (see the top of the file): int64 (queries
    [*batch, q_tokens], keys [*batch, kv_tokens]) for seen [*batch, rows, kv_tokens], a 4-D
    mask's when per_query."""
    kv_tokens = seen.shape[-1]
    if not per_query:  # a padding mask: cumsum - 1, padding 0
        kept = seen[..., 0, :]
        keys = (kept.to(torch.int64).cumsum(-1) - 1).masked_fill(~kept, 0)
        return keys[..., kv_tokens - q_tokens :], keys
    begin, end, _ = row_intervals(seen.any(-2))
    slots = torch.arange(kv_tokens)
    tokens = (slots >= begin[..., None]) & (slots < end[..., None])
    keys = (slots - begin[..., None]).masked_fill(~tokens, 0)
    if q_tokens == kv_tokens:
        return keys, keys
    query_slots = end[..., None] - q_tokens + torch.arange(q_tokens)
    queries = keys.gather(-1, query_slots.clamp(min=0))
    return queries.masked_fill(query_slots < 0, 0), keys


def batch_element(tensor, index):
    """tensor[index] for a batched tensor; a [tokens] tensor is shared."""
    return tensor if tensor.dim() == 1 else tensor[index]


def kernel_pieces(seen, qpos, kpos, window):
    """The kernel calls of a masked attention: [(index, q_begin, q_end, k_begin, k_end,
    options)], queries q_begin .. q_end of batch element index against its keys k_begin ..
    k_end, options (causal, window) to set for that call; queries in no piece see no key. None
    when some row's keys are not one interval (a padding mask with holes).

    A batch element is one call when every query sees the same keys, or when the queries that
    see keys are consecutive and their intervals are causal order by the positions (with the
    call's window, or with the widest row as a sliding window); else one call per run of
    queries that see the same keys."""
    begin, end, interval = row_intervals(seen)
    if not bool(interval.all()):
        return None
    q_tokens = qpos.shape[-1]
    pieces = []
    for index in np.ndindex(*seen.shape[:-2]):
        rows = list(zip(begin[index].tolist(), end[index].tolist()))
        if len(rows) == 1:
            rows = rows * q_tokens
        kept = [i for i, (b, e) in enumerate(rows) if e > b]
        if not kept:
            continue
        qa, qb = kept[0], kept[-1] + 1
        if len(set(rows[qa:qb])) == 1 and len(kept) == qb - qa:
            pieces.append((index, qa, qb, *rows[qa], {}))
            continue
        if len(kept) == qb - qa:
            ka = min(b for b, _ in rows[qa:qb])
            kb = max(e for _, e in rows[qa:qb])
            options = _causal_options(
                seen[index][..., qa:qb, ka:kb] if seen.shape[-2] > 1 else None,
                batch_element(qpos, index)[qa:qb],
                batch_element(kpos, index)[ka:kb],
                window,
                max(e - b for b, e in rows[qa:qb]),
            )
            if options is not None:
                pieces.append((index, qa, qb, ka, kb, options))
                continue
        run = qa
        for i in range(qa + 1, q_tokens + 1):
            if i == q_tokens or rows[i] != rows[run]:
                if rows[run][1] > rows[run][0]:
                    pieces.append((index, run, i, *rows[run], {}))
                run = i
    return pieces


def _causal_options(rows, qpos, kpos, window, widest):
    """{causal: True, window: w} when the positions with causal order (and window w: the call's,
    or when it has none, the widest row's) show each query exactly its row, else None."""
    if rows is None:
        return None
    distance = qpos[:, None] - kpos[None, :]
    for w in (window,) if window else (0, widest):
        seen = distance >= 0
        if w:
            seen &= distance < w
        if torch.equal(seen, rows):
            return {"causal": True, "window": w}
    return None
