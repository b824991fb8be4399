"""Fused (flash) attention forward over all heads in one launch (NKI v2 style): the kernel behind the PyTorch
device's ``scaled_dot_product_attention``.

Layouts follow AWS's NKI ``flash_fwd`` (Neuron docs, nki.kernels.flash_fwd: q ``(bs, n_heads, d, seq_q)``, k
``(bs, nk_heads, d, seq_k)``, v ``(bs, nv_heads, seq_v, d)``, o ``(bs, n_heads, seq_q, d)``), with batch and heads
flattened into one leading axis ``H``: ``qT[H, D, L]``, ``kT[H, D, S]``, ``v[H, S, D]`` -> ``o[H, L, D]``.  The head
dimension ``D`` (at most 128) is the contraction of ``Q K^T`` and so lies on the partitions of ``qT`` and ``kT``.

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

Dimensions: ``L`` and ``S`` multiples of 128 (the caller pads), ``D`` at most 128.  The backward pass has no kernel
here; :func:`trnsim.backend.costs.attention_backward_cost` documents its model.
"""

from ..nki import isa as nisa
from ..nki import language as nl

KV_BLOCK = 2048      # keys per softmax block: NKI flash_fwd's default seq_tile_size (Neuron docs, FlashConfig)


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


def flash_attention(qT, kT, v, scale=None, dropout_p=0.0, group=1):
    """``o[h] = softmax(scale * Q_h K_h^T) V_h`` for every head ``h`` of ``qT[H, D, L]``, ``kT[H, D, S]``,
    ``v[H, S, D]``; ``group`` heads share each load and store DMA."""
    H, D, L = qT.shape
    _, _, S = kT.shape
    P = nl.tile_size.pmax
    if D > P:
        raise ValueError(f"flash_attention: head dimension {D} exceeds the {P} partitions of the contraction")
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
    scale = float(D) ** -0.5 if scale is None else float(scale)
    keep = 1.0 / (1.0 - dropout_p)
    out = nl.ndarray((H, L, D), dtype=v.dtype, buffer=nl.shared_hbm, name="o")
    ST = S // P
    G = int(group)
    for h0 in range(0, H, G):
        g = min(G, H - h0)
        # the group's loads: one DMA each for q, k and v (the heads side by side along the free axis)
        q_s = nl.ndarray((D, g * L), dtype=qT.dtype, buffer=nl.sbuf, name="q")
        k_s = nl.ndarray((D, g * S), dtype=kT.dtype, buffer=nl.sbuf, name="k")
        v_s = nl.ndarray((P, g * ST * D), dtype=v.dtype, buffer=nl.sbuf, name="v")
        nisa.dma_copy(q_s, qT[h0:h0 + g].permute((1, 0, 2)))
        nisa.dma_copy(k_s, kT[h0:h0 + g].permute((1, 0, 2)))
        nisa.dma_copy(v_s, v[h0:h0 + g].reshape((g, ST, P, D)).permute((2, 0, 1, 3)))
        # work items (query tile, head, key block), software-pipelined by one: the scores and exponentials of the
        # next item are issued before the transposes and P V of this one, so the Tensor Engine computes the next
        # scores while the Vector and Scalar Engines finish this item's softmax (engines run in program order)
        items = [(l0, j, s0) for l0 in range(0, L, P) for j in range(g) for s0 in range(0, S, KV_BLOCK)]
        run = {}
        o_t = None
        pending = None
        for it in items + [None]:
            nxt = None
            if it is not None:
                l0, j, s0 = it
                if s0 == 0 and j == 0:
                    o_t = nl.ndarray((P, g * D), dtype=v.dtype, buffer=nl.sbuf, name="o_tile")
                st = run.setdefault((l0, j), {"m": None, "l": None, "o": None, "o_t": o_t})
                sc = _scores(q_s[:, j * L + l0:j * L + l0 + P], k_s[:, j * S:(j + 1) * S], s0, scale, v.dtype,
                             st["m"], dropout_p)
                nxt = (it, st, sc, st["m"])         # (the running max before this block, for its rescaling)
                st["m"] = sc[1]
            if pending is not None:
                (l0, j, s0), st, sc, m_prev = pending
                _pv_update(sc, v_s[:, j * ST * D:(j + 1) * ST * D], s0, S, st, m_prev, scale)
                if s0 + KV_BLOCK >= S:          # the last key block: O / l into this head's columns of the tile
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


def _scores(q_t, k_h, s0, scale, mm_dt, m_prev, dropout_p):
    """Scores of 128 queries (``q_t[D, 128]``) against the key block from ``s0`` of ``k_h[D, S]``, their (running)
    row maximum and the probabilities ``exp(scale * s - scale * max)`` (``mm_dt``) with their row sum."""
    D, P = q_t.shape
    S = k_h.shape[1]
    TN = nl.tile_size.gemm_moving_fmax
    sb = min(KV_BLOCK, S - s0)
    # one PSUM bank per 512 score columns (a matmul output never crosses a bank)
    chunks = [(c0, min(TN, sb - c0)) for c0 in range(0, sb, TN)]
    sc = [nl.ndarray((P, cw), dtype=nl.float32, buffer=nl.psum, name="scores") for _, cw in chunks]
    for (c0, cw), sc_c in zip(chunks, sc):
        nisa.nc_matmul(sc_c, q_t, k_h[:, s0 + c0:s0 + c0 + cw])
    mx = _row_combine(sc, "maximum", "mx")
    if m_prev is not None:
        m_new = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="m_new")
        nisa.tensor_tensor(m_new, m_prev, mx, op="maximum")
        mx = m_new
    neg = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="neg_max")
    nisa.tensor_scalar(neg, mx, "multiply", -scale)
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


def _pv_update(sc, v_h, s0, S, st, m_prev, scale):
    """``O_blk = P V`` for one key block (P transposed 128 x 128 through the Tensor Engine, every transpose issued
    before the products) and the running output and sum of ``st`` updated (FlashAttention, Algorithm 1)."""
    p_s, mx, neg, rs = sc
    P, sb = p_s.shape
    D = v_h.shape[1] // (S // P)
    mm_dt = p_s.dtype
    pts = []
    for t in range(sb // P):
        pt_ps = nl.ndarray((P, P), dtype=mm_dt, buffer=nl.psum, name="pT_psum")
        nisa.nc_transpose(pt_ps, p_s[:, t * P:(t + 1) * P])
        pt = nl.ndarray((P, P), dtype=mm_dt, buffer=nl.sbuf, name="pT")
        # PSUM -> SBUF on the Vector and Scalar Engines in turn (the Vector Engine also takes the row maxima)
        nisa.tensor_copy(pt, pt_ps, engine="scalar" if t % 2 else "vector")
        pts.append(pt)
    o_ps = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.psum, name="o_blk")
    for t, pt in enumerate(pts):
        kt = s0 // P + t
        nisa.nc_matmul(o_ps, pt, v_h[:, kt * D:(kt + 1) * D])
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
