"""Fused (flash) attention forward over all heads in one launch (NKI v2 style): the kernel behind the PyTorch
device's ``scaled_dot_product_attention``.

Layouts follow AWS's NKI ``flash_fwd`` (Neuron docs, nki.kernels.flash_fwd: q ``(bs, n_heads, d, seq_q)``, k
``(bs, nk_heads, d, seq_k)``, v ``(bs, nv_heads, seq_v, d)``, o ``(bs, n_heads, seq_q, d)``), with batch and heads
flattened into one leading axis ``H``: ``qT[H, D, L]``, ``kT[H, D, S]``, ``v[H, S, D]`` -> ``o[H, L, D]``.  The head
dimension ``D`` is the contraction of ``Q K^T`` and so lies on the partitions of ``qT`` and ``kT``.  A head
dimension over the 128 partitions (DeepSeek's latent attention: 192) is loaded as chunks of at most 128 rows, and
each score matmul accumulates its chunks in PSUM, as any contraction longer than the Tensor Engine's rows is done
(NKI ISA ``nc_matmul``: the contraction is the partition axis, at most 128); ``D`` is at most ``MAX_HEAD_DIM``, the
512 fp32 columns of one PSUM bank that ``O_blk = P V`` accumulates in.

Per group of heads (a loop in the one launch; every tile is allocated inside the loop, so the next group's loads
run while the engines work on this one, bounded by SBUF and PSUM capacity in schedule time):

* loads: ``qT``, ``kT`` and ``v`` of the group's heads in one DMA each (``head_group`` heads side by side);
* for each 128-row tile of queries, for each block of up to ``KV_BLOCK`` keys (NKI flash_fwd's default
  ``seq_tile_size`` of 2048):

  - scores ``S = Q K^T`` on the Tensor Engine into PSUM, 512 columns per matmul (the moving tile's limit);
  - the row maximum on the Vector Engine (read from PSUM), the exponentials ``exp(scale * S - scale * max)`` with
    their row sum in one Scalar Engine pass (written as the matmul dtype: the Tensor Engine's operand);
  - optionally dropout of the probabilities (Vector Engine);
  - ``P`` transposed through the Tensor Engine 128 x 128 at a time (PSUM) and copied back to SBUF, then
    ``O_blk = P V`` accumulated over the block's 128-key tiles in PSUM;
  - with more than one block, the online-softmax rescaling of FlashAttention (Dao et al. 2022, Algorithm 1): the
    running max, ``alpha = exp(scale * (m_old - m_new))``, ``l = alpha * l + rowsum`` and ``O = alpha * O + O_blk``;
* ``O / l`` (times ``1 / (1 - dropout_p)``) stored with one DMA per query tile and head group.

The (query tile, head, key block) items are software-pipelined by one: the next item's scores and exponentials
are issued before this item's transposes and ``P V``, so the in-order engines overlap them, as a compiler
schedules a flash kernel's loop.  The ``P^T`` copies out of PSUM alternate between the Vector and Scalar Engines.

Causal attention (``causal=True``; torch's ``is_causal``: query ``i`` attends to keys ``j <= i``, aligned top-left)
computes only what the mask leaves: a query tile's key range ends at its own last row, so the key tiles above the
diagonal are never loaded into a product, and the one tile on the diagonal gets its upper triangle set to a large
negative score (one Vector Engine add of a mask tile, made once per kernel by the GpSimd Engine's
``affine_select``) before the softmax.  AWS's context-encoding attention kernel does the same ("Enables compute
skipping: skip MM1/MM2 for upper triangle tiles", nki-library ``nkilib/core/attention/attention_cte.py``, module
docstring; docs/hardware.md, "How AWS's kernels do their work").

A sliding window (``window=w`` with ``causal``, :func:`flash_attention` only; query ``i`` keeps keys
``i - w < j <= i``, Hugging Face's sliding-window causal mask) also skips the key tiles before each query tile's
window and masks the tiles the window's start crosses, one mask per distinct tile offset made once per kernel;
nki-library's ``attention_cte`` does the same for its ``sliding_window`` ("Local attention: each query only attends
to nearby keys within a window", "Currently only works with causal", module docstring).

Dimensions: ``L`` and ``S`` multiples of 128 (the caller pads), ``D`` at most ``MAX_HEAD_DIM`` (``flash_attention``)
or 128 (``flash_attention_rows``).  The backward pass has no kernel
here; :func:`trnsim.backend.costs.attention_backward_cost` documents its model.
"""

from ..nki import isa as nisa
from ..nki import language as nl

KV_BLOCK = 2048      # keys per softmax block: NKI flash_fwd's default seq_tile_size (Neuron docs, FlashConfig)
# the widest head: O_blk[128, D] accumulates in one PSUM bank of 2 KiB per partition, 512 fp32 columns (the Tensor
# Engine's moving free size, nl.tile_size.gemm_moving_fmax; docs/hardware.md, PSUM)
MAX_HEAD_DIM = 512
MASKED = -3.0e38     # the score of a masked (causal) position: exp(scale * (MASKED - max)) is 0 in fp32
_STAGE_GAP = 2
_STAGES = 5           # flash_attention_rows: pipeline stages (scores, exp, dropout + P^T, P V, output)


def causal_keys(l0, P, S, causal):
    """The keys the query tile from row ``l0`` (``P`` rows) computes: all ``S``, or with ``causal`` those up to its
    last row (a multiple of 128 when ``l0`` is)."""
    return min(S, l0 + P) if causal else S


def key_range(l0, P, S, causal, window=None):
    """``(first, end)``: the keys the query tile from row ``l0`` (``P`` rows) computes.  ``end`` is
    :func:`causal_keys`; ``first`` is 0, or with a sliding ``window`` the start of the 128-key tile that holds the
    first key the tile's first row keeps (``l0 - window + 1``): the key tiles before it are never loaded into a
    product."""
    end = causal_keys(l0, P, S, causal)
    if not window:
        return 0, end
    return max(0, l0 - int(window) + 1) // P * P, end


def band_tiles(l0, first, end, P, window):
    """The key tiles (their first key) of the query tile from ``l0`` that a sliding ``window`` (with the causal
    mask) masks in part: the diagonal tile, and every tile before ``l0 + P - window`` (where the last row's window
    begins)."""
    return [kt for kt in range(first, end, P) if kt == l0 or kt < l0 + P - int(window)]


def _band(masks, P, t0, window):
    """The additive mask of the key tile ``t0`` keys after the query tile's first row, for causal attention with a
    sliding ``window`` (query ``i`` keeps key ``j`` when ``i - window < j <= i``, Hugging Face's
    ``sliding_window_causal_mask_function``): 0 where kept, :data:`MASKED` elsewhere; one per distinct ``t0``,
    made once per kernel (memset, then one GpSimd ``affine_select`` per bound the tile crosses)."""
    key = ("band", t0, int(window))
    m = masks.get(key)
    if m is not None:
        return m
    w = int(window)
    src = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.sbuf, name="band_zero")
    nisa.memset(src, 0.0)
    if t0 == 0:             # the diagonal: keep column c <= row r
        d = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.sbuf, name="band_causal")
        nisa.affine_select(d, [[-1, P]], 1, src, MASKED, cmp_op="greater_equal", offset=0)
        src = d
    if t0 < P - w:          # the window's start: keep t0 + c > r - w, i.e. c - r + w + t0 - 1 >= 0
        d = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.sbuf, name="band_window")
        nisa.affine_select(d, [[1, P]], -1, src, MASKED, cmp_op="greater_equal", offset=w + t0 - 1)
        src = d
    masks[key] = src
    return src


def _mask_tiles(sc, chunks, tiles):
    """The score tiles of a key block listed in ``tiles`` (``[(column in the block, mask)]``, multiples of 128)
    plus their masks, into SBUF (Vector Engine); every other column stays in PSUM, read there by the softmax.
    Returns the new (chunks, tiles)."""
    P = sc[0].shape[0]
    at = dict(tiles)
    out_c, out_t = [], []
    for (c0, cw), t in zip(chunks, sc):
        run = None          # the start of the current run of unmasked columns
        for c in range(c0, c0 + cw, P):
            if c in at:
                if run is not None:
                    out_c.append((run, c - run))
                    out_t.append(t[:, run - c0:c - c0])
                    run = None
                m = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.sbuf, name="scores_masked")
                nisa.tensor_tensor(m, t[:, c - c0:c - c0 + P], at[c], op="add")
                out_c.append((c, P))
                out_t.append(m)
            elif run is None:
                run = c
        if run is not None:
            out_c.append((run, c0 + cw - run))
            out_t.append(t if run == c0 else t[:, run - c0:cw])
    return out_c, out_t


def _diagonal(masks, P):
    """The additive mask of the ``[P, P]`` diagonal tile (query row ``i`` keeps key column ``j <= i``): 0 where kept,
    :data:`MASKED` elsewhere; made once per kernel (memset, then the GpSimd Engine's affine_select)."""
    m = masks.get(P)
    if m is None:
        z = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.sbuf, name="causal_zero")
        nisa.memset(z, 0.0)
        m = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.sbuf, name="causal_mask")
        nisa.affine_select(m, [[-1, P]], 1, z, MASKED, cmp_op="greater_equal", offset=0)
        masks[P] = m
    return m


def _mask_last(sc, chunks, masks):
    """The diagonal tile (the last ``P`` columns of the last score chunk, in PSUM) plus the mask, into SBUF (Vector
    Engine); the columns before it stay in PSUM, read there by the softmax.  Returns the new (chunks, tiles)."""
    P, (c0, cw) = sc[-1].shape[0], chunks[-1]
    t = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.sbuf, name="scores_masked")
    nisa.tensor_tensor(t, sc[-1][:, cw - P:cw], _diagonal(masks, P), op="add")
    if cw == P:
        return chunks, sc[:-1] + [t]
    return (chunks[:-1] + [(c0, cw - P), (c0 + cw - P, P)],
            sc[:-1] + [sc[-1][:, :cw - P], t])


def _row_combine(tiles, op, name):
    """``op`` over the free axis of each tile, then over the tiles: a ``[P, 1]`` fp32 column."""
    P = tiles[0].shape[0]
    parts = nl.ndarray((P, len(tiles)), dtype=nl.float32, buffer=nl.sbuf, name=name + "_parts")
    for i, t in enumerate(tiles):
        nisa.tensor_reduce(parts[:, i:i + 1], op, t, axis=1)
    if len(tiles) == 1:
        return parts
    res = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name=name)
    nisa.tensor_reduce(res, op, parts, axis=1)
    return res


def head_group(L, S, D, itemsize, knee_bytes):
    """Heads loaded by one DMA: enough that a partition's share of the q load (``L`` elements per head) reaches the
    DMA throughput curve's knee ``knee_bytes`` (``target.dma_knee_bytes_per_partition``), at most 16."""
    return max(1, min(16, -(-int(knee_bytes) // (min(L, S) * itemsize))))


def flash_attention(qT, kT, v, scale=None, dropout_p=0.0, group=1, causal=False, window=None):
    """``o[h] = softmax(scale * Q_h K_h^T) V_h`` for every head ``h`` of ``qT[H, D, L]``, ``kT[H, D, S]``,
    ``v[H, S, D]``; ``group`` heads share each load and store DMA; ``causal``: query ``i`` attends to keys
    ``j <= i`` only, the masked key tiles skipped (see the module docstring); ``window`` (with ``causal``): a
    sliding window, query ``i`` attends to keys ``i - window < j <= i`` only, the key tiles before the window
    skipped too and the tiles the window's start crosses masked (:func:`band_tiles`)."""
    H, D, L = qT.shape
    _, _, S = kT.shape
    P = nl.tile_size.pmax
    if D > MAX_HEAD_DIM:
        raise ValueError(f"flash_attention: head dimension {D} exceeds {MAX_HEAD_DIM}, the fp32 columns of the one "
                         "PSUM bank the output block accumulates in")
    if L % P or S % P:
        raise ValueError(f"flash_attention: query length {L} and key length {S} must be multiples of {P} "
                         "(the caller pads)")
    if tuple(v.shape) != (H, S, D) or tuple(kT.shape[:2]) != (H, D):
        raise ValueError(f"flash_attention: shapes qT {tuple(qT.shape)}, kT {tuple(kT.shape)}, v {tuple(v.shape)} "
                         "do not match [H, D, L], [H, D, S], [H, S, D]")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"flash_attention: dropout_p {dropout_p} is outside [0, 1)")
    if int(group) < 1:
        raise ValueError(f"flash_attention: group {group} must be at least 1")
    if window is not None and (not causal or int(window) < 1):
        raise ValueError(f"flash_attention: window {window}: a sliding window is at least 1 key and needs "
                         "causal=True (as nki-library's attention_cte: \"SWA currently only supports causal attn\")")
    if window is not None and L > S + int(window) - 1:
        raise ValueError(f"flash_attention: query rows from {S + int(window) - 1} of {L} keep no key (keys end at "
                         f"{S}, the window is {window}): their softmax is undefined")
    scale = float(D) ** -0.5 if scale is None else float(scale)
    keep = 1.0 / (1.0 - dropout_p)
    out = nl.ndarray((H, L, D), dtype=v.dtype, buffer=nl.shared_hbm, name="o")
    ST = S // P
    G = int(group)
    # the contraction's partition chunks: one for D <= 128
    dch = [(d0, min(P, D - d0)) for d0 in range(0, D, P)]
    masks = {}
    for h0 in range(0, H, G):
        g = min(G, H - h0)
        # the group's loads: one DMA each for q, k (per chunk of D) and v (the heads side by side along the free axis)
        q_s = [nl.ndarray((dw, g * L), dtype=qT.dtype, buffer=nl.sbuf, name="q") for _, dw in dch]
        k_s = [nl.ndarray((dw, g * S), dtype=kT.dtype, buffer=nl.sbuf, name="k") for _, dw in dch]
        v_s = nl.ndarray((P, g * ST * D), dtype=v.dtype, buffer=nl.sbuf, name="v")
        for (d0, dw), qc, kc in zip(dch, q_s, k_s):
            nisa.dma_copy(qc, qT[h0:h0 + g, d0:d0 + dw].permute((1, 0, 2)))
            nisa.dma_copy(kc, kT[h0:h0 + g, d0:d0 + dw].permute((1, 0, 2)))
        nisa.dma_copy(v_s, v[h0:h0 + g].reshape((g, ST, P, D)).permute((2, 0, 1, 3)))
        # work items (query tile, head, key block), software-pipelined by one: the scores and exponentials of the
        # next item are issued before the transposes and P V of this one, so the Tensor Engine computes the next
        # scores while the Vector and Scalar Engines finish this item's softmax (engines run in program order)
        items = [(l0, j, s0) for l0 in range(0, L, P) for j in range(g)
                 for s0 in range(*key_range(l0, P, S, causal, window)[:2], KV_BLOCK)]
        run = {}
        o_t = None
        pending = None
        for it in items + [None]:
            nxt = None
            if it is not None:
                l0, j, s0 = it
                ks, se = key_range(l0, P, S, causal, window)
                if s0 == ks and j == 0:
                    o_t = nl.ndarray((P, g * D), dtype=v.dtype, buffer=nl.sbuf, name="o_tile")
                st = run.setdefault((l0, j), {"m": None, "l": None, "o": None, "o_t": o_t})
                qj = [qc[:, j * L + l0:j * L + l0 + P] for qc in q_s]
                band = None
                if window is not None:
                    band = [(kt - s0, _band(masks, P, kt - l0, window))
                            for kt in band_tiles(l0, ks, se, P, window) if s0 <= kt < s0 + KV_BLOCK]
                sc = _scores(qj, [kc[:, j * S:j * S + se] for kc in k_s], s0, scale, v.dtype,
                             st["m"], dropout_p, masks if causal and window is None and se == l0 + P else None,
                             band)
                nxt = (it, st, sc, st["m"])         # (the running max before this block, for its rescaling)
                st["m"] = sc[1]
            if pending is not None:
                (l0, j, s0), st, sc, m_prev = pending
                ks, se = key_range(l0, P, S, causal, window)
                _pv_update(sc, v_s[:, j * ST * D:(j + 1) * ST * D], s0, se - ks, st, m_prev, scale, D=D)
                if s0 + KV_BLOCK >= se:         # the last key block: O / l into this head's columns of the tile
                    rl = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="inv_sum")
                    nisa.reciprocal(rl, st["l"])
                    nisa.tensor_scalar(st["o_t"][:, j * D:(j + 1) * D], st["o"], "multiply", rl, op1="multiply",
                                       operand1=keep)
                    del run[(l0, j)]
                    if j == g - 1:
                        nisa.dma_copy(out[h0:h0 + g, l0:l0 + P, :].permute((1, 0, 2)), st["o_t"])
            pending = nxt
        o_t = None
        q_s = k_s = v_s = None      # the next group's tiles are fresh allocations: its loads need not wait
    return out


def heads_per_transpose(D):
    """Heads whose ``D`` columns one 128 x 128 Tensor Engine transpose turns onto partitions: the transposed heads
    then sit at partition offsets that a ``D``-partition matmul operand may start at (docs/hardware.md, memory
    rules: 33-64 partitions start at 0 or 64, 32 or fewer at 0, 32, 64 or 96)."""
    return 4 if D <= 32 else 2 if D <= 64 else 1


def rows_fit(L, S, HD, itemsize, target):
    """True when ``flash_attention_rows`` applies: at most ``KV_BLOCK`` keys (one softmax block); one batch
    element's query, key and value rows (``[L | S, H x D]``), their transposes and outputs within a quarter of a
    partition (the kernel keeps them for the whole batch element, the next one's loads beside them); and the fp32
    scores of the items the software pipeline keeps in flight within PSUM: stage 0 of item ``n`` is issued before
    stage 1 of item ``n - _STAGE_GAP`` frees its banks, so ``_STAGE_GAP + 1`` items' scores (``S x 4`` bytes per
    partition each) are live at once (beyond that the capacity check refuses the kernel, e.g. 2048 keys at
    ``D = 64``)."""
    P = target.pmax
    need = 2 * ((L // P) * HD + 2 * (S // P) * HD) * itemsize
    scores = (_STAGE_GAP + 1) * S * 4
    return S <= KV_BLOCK and need <= target.sbuf_partition_bytes // 4 and scores <= target.psum_partition_bytes


def flash_attention_rows(q, k, v, heads, scale=None, dropout_p=0.0, causal=False):
    """``o = softmax(scale * Q K^T) V`` per head on the layout the projections write: ``q[B, L, H x D]``,
    ``k[B, S, H x D]``, ``v[B, S, H x D]`` -> ``o[B, L, H x D]`` (token rows with the heads side by side, as a
    linear layer's output ``[B, L, hidden]`` is viewed as ``[B, L, H, D]`` by every Hugging Face attention).

    Loads are whole token rows: per batch element one DMA each for q, k and v (runs of ``H x D`` elements, against
    ``L`` or ``D`` elements per run in the head-major layout of :func:`flash_attention`: for BERT-Large 2 KiB
    against 256 or 128 B, far past the DMA throughput curve's knee).  ``Q^T`` and ``K^T`` (the contraction ``D``
    on partitions) are made on chip by the Tensor Engine, 128 x 128 at a time: one transpose covers
    :func:`heads_per_transpose` heads, whose products then use the partitions ``[j D, (j + 1) D)`` of the
    transposed tile.  Per (query tile, head, key block) the work is :func:`flash_attention`'s (scores, softmax with
    its row sum, dropout, ``P^T`` through the Tensor Engine, ``P V``, online rescaling past ``KV_BLOCK`` keys),
    software-pipelined by one item in the same way; each query tile's output rows leave with one DMA.  Every
    tile is allocated inside the batch loop, so the next batch element's loads overlap this one's compute.

    ``causal``: query ``i`` attends to keys ``j <= i`` only; each query tile's scores, softmax, ``P^T`` and ``P V``
    stop at its diagonal tile, which is masked (see the module docstring).

    Dimensions: ``L`` and ``S`` multiples of 128 (the caller pads), ``D = H x D / heads`` at most 128, and one
    batch element's rows within :func:`rows_fit` (the caller uses :func:`flash_attention` otherwise)."""
    B, L, HD = q.shape
    _, S, _ = k.shape
    P = nl.tile_size.pmax
    H = int(heads)
    if H < 1 or HD % H:
        raise ValueError(f"flash_attention_rows: {HD} columns do not split into {heads} heads")
    D = HD // H
    if D > P:
        raise ValueError(f"flash_attention_rows: head dimension {D} exceeds the {P} partitions of the contraction")
    if L % P or S % P:
        raise ValueError(f"flash_attention_rows: query length {L} and key length {S} must be multiples of {P} "
                         "(the caller pads)")
    if S > KV_BLOCK:
        raise ValueError(f"flash_attention_rows: key length {S} exceeds one softmax block of {KV_BLOCK} keys "
                         "(use flash_attention)")
    if tuple(k.shape) != (B, S, HD) or tuple(v.shape) != (B, S, HD):
        raise ValueError(f"flash_attention_rows: shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} "
                         "do not match [B, L, H x D], [B, S, H x D], [B, S, H x D]")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"flash_attention_rows: dropout_p {dropout_p} is outside [0, 1)")
    scale = float(D) ** -0.5 if scale is None else float(scale)
    keep = 1.0 / (1.0 - dropout_p)
    mm_dt = v.dtype
    LT, ST = L // P, S // P
    hp = heads_per_transpose(D)
    out = nl.ndarray((B, L, HD), dtype=v.dtype, buffer=nl.shared_hbm, name="o")
    masks = {}
    for b in range(B):
        q_s = nl.ndarray((P, LT * HD), dtype=q.dtype, buffer=nl.sbuf, name="q_rows")
        k_s = nl.ndarray((P, ST * HD), dtype=k.dtype, buffer=nl.sbuf, name="k_rows")
        v_s = nl.ndarray((P, ST * HD), dtype=v.dtype, buffer=nl.sbuf, name="v_rows")
        nisa.dma_copy(q_s, q[b].reshape((LT, P, HD)).permute((1, 0, 2)))
        nisa.dma_copy(k_s, k[b].reshape((ST, P, HD)).permute((1, 0, 2)))
        nisa.dma_copy(v_s, v[b].reshape((ST, P, HD)).permute((1, 0, 2)))
        # K^T and Q^T of every head group ([hp x D, S] and [hp x D, L]): one transpose per 128-row tile
        groups = range(0, H, hp)
        k_t = [_transposed(k_s, ST, HD, g0 * D, min(hp, H - g0) * D, "kT", i) for i, g0 in enumerate(groups)]
        q_t = [_transposed(q_s, LT, HD, g0 * D, min(hp, H - g0) * D, "qT", i + 1) for i, g0 in enumerate(groups)]
        o_t = [nl.ndarray((P, HD), dtype=v.dtype, buffer=nl.sbuf, name="o_rows") for _ in range(LT)]
        items = [(lt, j) for lt in range(LT) for j in range(H)]
        st = {}
        # software pipeline: stage s of item n - s in iteration n, so that no stage waits on the one before it in
        # the same iteration (every engine in program order; see the module docstring)
        for n in range(len(items) + _STAGE_GAP * (_STAGES - 1)):
            for stage in range(_STAGES):
                i = n - _STAGE_GAP * stage
                if not 0 <= i < len(items):
                    continue
                lt, j = items[i]
                g, r = divmod(j, hp)
                if stage == 0:
                    se = causal_keys(lt * P, P, S, causal)
                    st[i] = _stage_scores(q_t[g][r * D:(r + 1) * D, lt * P:(lt + 1) * P],
                                          k_t[g][r * D:(r + 1) * D, :se],
                                          masks if causal and se == (lt + 1) * P else None)
                elif stage == 1:
                    _stage_exp(st[i], scale, mm_dt)
                elif stage == 2:
                    _stage_drop_transpose(st[i], dropout_p)
                elif stage == 3:
                    _stage_pv(st[i], v_s[:, j * D:], D, HD, i)
                else:
                    _stage_out(st.pop(i), o_t[lt][:, j * D:(j + 1) * D], keep)
                    if j == H - 1:
                        nisa.dma_copy(out[b, lt * P:(lt + 1) * P, :], o_t[lt])
        q_t = o_t = None
        q_s = k_s = v_s = k_t = None    # the next batch element's tiles are fresh allocations: its loads need not wait
    return out


def _transposed(rows, tiles, pitch, c0, w, name, turn=0):
    """``[w, tiles x 128]``: columns ``c0:c0 + w`` of each of ``tiles`` 128-row tiles of ``rows`` (tile ``t`` from
    column ``t x pitch``) transposed through the Tensor Engine (PSUM), copied back to SBUF by the Vector and
    Scalar Engines in turn."""
    P = rows.shape[0]
    dst = nl.ndarray((w, tiles * P), dtype=rows.dtype, buffer=nl.sbuf, name=name)
    for t in range(tiles):
        ps = nl.ndarray((w, P), dtype=rows.dtype, buffer=nl.psum, name=name + "_psum")
        nisa.nc_transpose(ps, rows[:, t * pitch + c0:t * pitch + c0 + w])
        nisa.tensor_copy(dst[:, t * P:(t + 1) * P], ps, engine="scalar" if (t + turn) % 2 else "vector")
    return dst


def _stage_scores(q_t, k_h, masks=None):
    """Stage 0: the scores of 128 queries (``q_t[D, 128]``) against every key (``k_h[D, S]``, ``S`` at most
    ``KV_BLOCK``) into PSUM, one bank per 512 columns, and their row maximum (Vector Engine).  ``masks`` (causal):
    the last 128 keys are the diagonal tile, masked."""
    P = q_t.shape[1]
    S = k_h.shape[1]
    TN = nl.tile_size.gemm_moving_fmax
    chunks = [(c0, min(TN, S - c0)) for c0 in range(0, S, TN)]
    sc = [nl.ndarray((P, cw), dtype=nl.float32, buffer=nl.psum, name="scores") for _, cw in chunks]
    for (c0, cw), sc_c in zip(chunks, sc):
        nisa.nc_matmul(sc_c, q_t, k_h[:, c0:c0 + cw])
    if masks is not None:
        chunks, sc = _mask_last(sc, chunks, masks)
    return {"chunks": chunks, "sc": sc, "mx": _row_combine(sc, "maximum", "mx")}


def _stage_exp(it, scale, mm_dt):
    """Stage 1 (Scalar Engine): ``exp(scale * s - scale * max)`` with its row sum, one pass per PSUM bank."""
    chunks, sc = it["chunks"], it["sc"]
    P = sc[0].shape[0]
    neg = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="neg_max")
    nisa.tensor_scalar(neg, it["mx"], "multiply", -scale, engine="scalar")
    p_s = nl.ndarray((P, chunks[-1][0] + chunks[-1][1]), dtype=mm_dt, buffer=nl.sbuf, name="probs")
    parts = nl.ndarray((P, len(chunks)), dtype=nl.float32, buffer=nl.sbuf, name="rowsums")
    for i, ((c0, cw), sc_c) in enumerate(zip(chunks, sc)):
        nisa.activation(p_s[:, c0:c0 + cw], "exp", sc_c, bias=neg, scale=scale, reduce_op="add",
                        reduce_res=parts[:, i:i + 1])
    rs = parts
    if len(chunks) > 1:
        rs = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="rowsum")
        nisa.tensor_reduce(rs, "add", parts, axis=1)
    it.update(p=p_s, rs=rs)
    it["sc"] = None             # the scores' PSUM banks are free


def _stage_drop_transpose(it, dropout_p):
    """Stage 2: dropout of the probabilities (Vector Engine) and ``P^T`` through the Tensor Engine, 128 x 128
    at a time, into PSUM."""
    p_s = it["p"]
    P, S = p_s.shape
    if dropout_p > 0.0:
        nisa.dropout(p_s, p_s, dropout_p)
    pts = []
    for t in range(S // P):
        pt_ps = nl.ndarray((P, P), dtype=p_s.dtype, buffer=nl.psum, name="pT_psum")
        nisa.nc_transpose(pt_ps, p_s[:, t * P:(t + 1) * P])
        pts.append(pt_ps)
    it["pt_ps"] = pts


def _stage_pv(it, v_h, D, pitch, turn):
    """Stage 3: ``P^T`` copied to SBUF (Vector and Scalar Engines in turn) and ``O = P V`` accumulated over the
    key tiles in PSUM (key tile ``t``'s values: the ``D`` columns of ``v_h`` from ``t x pitch``)."""
    pts = []
    for t, pt_ps in enumerate(it.pop("pt_ps")):
        pt = nl.ndarray(tuple(pt_ps.shape), dtype=pt_ps.dtype, buffer=nl.sbuf, name="pT")
        nisa.tensor_copy(pt, pt_ps, engine="scalar" if (t + turn) % 2 else "vector")
        pts.append(pt)
    P = pts[0].shape[0]
    o_ps = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.psum, name="o_blk")
    for t, pt in enumerate(pts):
        nisa.nc_matmul(o_ps, pt, v_h[:, t * pitch:t * pitch + D])
    it["o"] = o_ps
    it["p"] = None


def _stage_out(it, dst, keep):
    """Stage 4 (Scalar Engine): ``O / l`` (times the dropout's ``1 / (1 - p)``) into the output rows."""
    P = dst.shape[0]
    rl = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="inv_sum")
    nisa.reciprocal(rl, it["rs"], engine="scalar")
    nisa.tensor_scalar(dst, it["o"], "multiply", rl, op1="multiply", operand1=keep, engine="scalar")


def _scores(q_t, k_h, s0, scale, mm_dt, m_prev, dropout_p, masks=None, band=None):
    """Scores of 128 queries (``q_t[D, 128]``) against the key block from ``s0`` of ``k_h[D, S]``, their (running)
    row maximum and the probabilities ``exp(scale * s - scale * max)`` (``mm_dt``) with their row sum.  ``masks``
    (causal, when ``k_h`` ends at the tile's diagonal): the block's last 128 keys are the diagonal tile, masked.
    ``q_t`` and ``k_h`` may be lists of the contraction's partition chunks (a head over 128 wide): each score
    matmul then accumulates over them in PSUM.  ``band`` (a sliding window): ``[(column in the block, mask)]``,
    the block's tiles to mask (:func:`_mask_tiles`)."""
    q_t = q_t if isinstance(q_t, list) else [q_t]
    k_h = k_h if isinstance(k_h, list) else [k_h]
    P = q_t[0].shape[1]
    S = k_h[0].shape[1]
    TN = nl.tile_size.gemm_moving_fmax
    sb = min(KV_BLOCK, S - s0)
    # one PSUM bank per 512 score columns (a matmul output never crosses a bank)
    chunks = [(c0, min(TN, sb - c0)) for c0 in range(0, sb, TN)]
    sc = [nl.ndarray((P, cw), dtype=nl.float32, buffer=nl.psum, name="scores") for _, cw in chunks]
    for (c0, cw), sc_c in zip(chunks, sc):
        for qc, kc in zip(q_t, k_h):
            nisa.nc_matmul(sc_c, qc, kc[:, s0 + c0:s0 + c0 + cw])
    if masks is not None and s0 + sb == S:
        chunks, sc = _mask_last(sc, chunks, masks)
    if band:
        chunks, sc = _mask_tiles(sc, chunks, band)
    mx = _row_combine(sc, "maximum", "mx")
    if m_prev is not None:
        m_new = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="m_new")
        nisa.tensor_tensor(m_new, m_prev, mx, op="maximum")
        mx = m_new
    neg = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="neg_max")
    nisa.tensor_scalar(neg, mx, "multiply", -scale, engine="scalar")   # read next by the Scalar Engine's exp
    # exp(scale * s - scale * max) with its row sum, one Scalar Engine pass per PSUM bank
    p_s = nl.ndarray((P, sb), dtype=mm_dt, buffer=nl.sbuf, name="probs")
    parts = nl.ndarray((P, len(chunks)), dtype=nl.float32, buffer=nl.sbuf, name="rowsums")
    for i, ((c0, cw), sc_c) in enumerate(zip(chunks, sc)):
        nisa.activation(p_s[:, c0:c0 + cw], "exp", sc_c, bias=neg, scale=scale, reduce_op="add",
                        reduce_res=parts[:, i:i + 1])
    rs = parts
    if len(chunks) > 1:
        rs = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="rowsum")
        nisa.tensor_reduce(rs, "add", parts, axis=1)
    if dropout_p > 0.0:
        nisa.dropout(p_s, p_s, dropout_p)
    return p_s, mx, neg, rs


def _pv_update(sc, v_h, s0, S, st, m_prev, scale, D=None, pitch=None, turn=0):
    """``O_blk = P V`` for one key block (P transposed 128 x 128 through the Tensor Engine, every transpose issued
    before the products) and the running output and sum of ``st`` updated (FlashAttention, Algorithm 1).  The
    values of key tile ``kt`` are the ``D`` columns of ``v_h`` from ``kt * pitch`` (default: tiles side by side);
    ``turn`` picks the engine of the first ``P^T`` copy (the copies alternate between Vector and Scalar)."""
    p_s, mx, neg, rs = sc
    P, sb = p_s.shape
    D = D or v_h.shape[1] // (S // P)
    pitch = pitch or D
    mm_dt = p_s.dtype
    pts = []
    for t in range(sb // P):
        pt_ps = nl.ndarray((P, P), dtype=mm_dt, buffer=nl.psum, name="pT_psum")
        nisa.nc_transpose(pt_ps, p_s[:, t * P:(t + 1) * P])
        pt = nl.ndarray((P, P), dtype=mm_dt, buffer=nl.sbuf, name="pT")
        # PSUM -> SBUF on the Vector and Scalar Engines in turn (the Vector Engine also takes the row maxima)
        nisa.tensor_copy(pt, pt_ps, engine="scalar" if (t + turn) % 2 else "vector")
        pts.append(pt)
    o_ps = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.psum, name="o_blk")
    for t, pt in enumerate(pts):
        kt = s0 // P + t
        nisa.nc_matmul(o_ps, pt, v_h[:, kt * pitch:kt * pitch + D])
    if st["o"] is None:
        if S > KV_BLOCK:        # more blocks follow: the running output is kept in SBUF
            o_run = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf, name="o_acc")
            nisa.tensor_copy(o_run, o_ps)
        else:
            o_run = o_ps
        st["o"], st["l"] = o_run, rs
        return
    # online softmax: alpha = exp(scale * (m_old - m_new)) rescales the running sum and output
    alpha = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="alpha")
    nisa.activation(alpha, "exp", m_prev, bias=neg, scale=scale)
    l_new = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="l_new")
    nisa.scalar_tensor_tensor(l_new, st["l"], "multiply", alpha, "add", rs)
    o_new = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf, name="o_acc")
    nisa.scalar_tensor_tensor(o_new, st["o"], "multiply", alpha, "add", o_ps)
    st["o"], st["l"] = o_new, l_new
