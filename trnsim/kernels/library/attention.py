"""Fused (flash) attention forward over all heads in one launch (NKI v2 style): the kernel behind the PyTorch
device's ``scaled_dot_product_attention``.

Layouts follow AWS's NKI ``flash_fwd`` (Neuron docs, nki.kernels.flash_fwd: q ``(bs, n_heads, d, seq_q)``, k
``(bs, nk_heads, d, seq_k)``, v ``(bs, nv_heads, seq_v, d)``, o ``(bs, n_heads, seq_q, d)``), with batch and heads
flattened into one leading axis ``H``: ``qT[H, D, L]``, ``kT[H, D, S]``, ``v[H, S, D]`` -> ``o[H, L, D]``.  The head
dimension ``D`` (at most 128) is the contraction of ``Q K^T`` and so lies on the partitions of ``qT`` and ``kT``.

Per head (a loop in the one launch; every tile is allocated inside the loop, so the next head's loads run while the
engines work on this one, bounded by SBUF and PSUM capacity in schedule time):

* loads: ``qT`` and ``kT`` of the head in one DMA each, ``v`` one 128-row slab per DMA;
* for each 128-row tile of queries, for each block of up to ``KV_BLOCK`` keys (NKI flash_fwd's default
  ``seq_tile_size`` of 2048):

  - scores ``S = Q K^T`` on the Tensor Engine into PSUM, 512 columns per matmul (the moving tile's limit);
  - the row maximum on the Vector Engine (read from PSUM), the exponentials ``exp(scale * S - scale * max)`` with
    their row sum in one Scalar Engine pass (written as the matmul dtype: the Tensor Engine's operand);
  - optionally dropout of the probabilities (Vector Engine);
  - ``P`` transposed through the Tensor Engine 128 x 128 at a time (PSUM) and copied back to SBUF, then
    ``O += P^T^T V`` accumulated over the block's 128-key tiles in PSUM;
  - with more than one block, the online-softmax rescaling of FlashAttention (Dao et al. 2022, Algorithm 1): the
    running max, ``alpha = exp(scale * (m_old - m_new))``, ``l = alpha * l + rowsum`` and ``O = alpha * O + O_blk``;
* ``O / l`` (times ``1 / (1 - dropout_p)``) stored with one DMA per query tile.

Dimensions: ``L`` and ``S`` multiples of 128 (the caller pads), ``D`` at most 128.  The backward pass has no kernel
here; :func:`trnsim.backend.costs.attention_cost` documents its model.
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
        for l0 in range(0, L, P):
            o_t = nl.ndarray((P, g * D), dtype=v.dtype, buffer=nl.sbuf, name="o_tile")
            for j in range(g):
                _query_tile(q_s[:, j * L + l0:j * L + l0 + P], k_s[:, j * S:(j + 1) * S],
                            v_s[:, j * ST * D:(j + 1) * ST * D], o_t[:, j * D:(j + 1) * D], scale, keep,
                            dropout_p)
            nisa.dma_copy(out[h0:h0 + g, l0:l0 + P, :].permute((1, 0, 2)), o_t)
            o_t = None
        q_s = k_s = v_s = None      # the next group's tiles are fresh allocations: its loads need not wait
    return out


def _query_tile(q_t, k_h, v_h, o_t, scale, keep, dropout_p):
    """One head's 128 queries (``q_t[D, 128]``) against all its keys (``k_h[D, S]``, ``v_h[128, S/128 * D]``) into
    ``o_t[128, D]``."""
    D, P = q_t.shape
    S = k_h.shape[1]
    TN = nl.tile_size.gemm_moving_fmax
    mm_dt = v_h.dtype
    m_run = l_run = o_run = None
    for s0 in range(0, S, KV_BLOCK):
        sb = min(KV_BLOCK, S - s0)
        # one PSUM bank per 512 score columns (a matmul output never crosses a bank)
        chunks = [(c0, min(TN, sb - c0)) for c0 in range(0, sb, TN)]
        sc = [nl.ndarray((P, cw), dtype=nl.float32, buffer=nl.psum, name="scores") for _, cw in chunks]
        for (c0, cw), sc_c in zip(chunks, sc):
            nisa.nc_matmul(sc_c, q_t, k_h[:, s0 + c0:s0 + c0 + cw])
        mx = _row_combine(sc, "maximum", "mx")
        if m_run is not None:
            m_new = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="m_new")
            nisa.tensor_tensor(m_new, m_run, mx, op="maximum")
            mx = m_new
        neg = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="neg_max")
        nisa.tensor_scalar(neg, mx, "multiply", -scale)
        # exp(scale * s - scale * max) with its row sum, one Scalar Engine pass per PSUM bank
        p_s = nl.ndarray((P, sb), dtype=mm_dt, buffer=nl.sbuf, name="probs")
        parts = nl.ndarray((P, len(chunks)), dtype=nl.float32, buffer=nl.sbuf, name="rowsums")
        for i, ((c0, cw), sc_c) in enumerate(zip(chunks, sc)):
            nisa.activation(p_s[:, c0:c0 + cw], "exp", sc_c, bias=neg, scale=scale, reduce_op="add",
                            reduce_res=parts[:, i:i + 1])
        sc = None
        rs = parts
        if len(chunks) > 1:
            rs = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="rowsum")
            nisa.tensor_reduce(rs, "add", parts, axis=1)
        if dropout_p > 0.0:
            nisa.dropout(p_s, p_s, dropout_p)
        # O_blk = P V: P transposed 128 x 128 through the Tensor Engine, accumulated over the block's key tiles
        o_ps = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.psum, name="o_blk")
        for t in range(sb // P):
            pt_ps = nl.ndarray((P, P), dtype=mm_dt, buffer=nl.psum, name="pT_psum")
            nisa.nc_transpose(pt_ps, p_s[:, t * P:(t + 1) * P])
            pt = nl.ndarray((P, P), dtype=mm_dt, buffer=nl.sbuf, name="pT")
            nisa.tensor_copy(pt, pt_ps)
            st = s0 // P + t
            nisa.nc_matmul(o_ps, pt, v_h[:, st * D:(st + 1) * D])
        p_s = None
        if m_run is None:
            if S > KV_BLOCK:        # more blocks follow: the running output is kept in SBUF
                o_run = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf, name="o_acc")
                nisa.tensor_copy(o_run, o_ps)
            else:
                o_run = o_ps
            m_run, l_run = mx, rs
            continue
        # online softmax (FlashAttention, Algorithm 1): alpha = exp(scale * (m_old - m_new)) rescales the running
        # sum and output
        alpha = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="alpha")
        nisa.activation(alpha, "exp", m_run, bias=neg, scale=scale)
        l_new = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="l_new")
        nisa.scalar_tensor_tensor(l_new, l_run, "multiply", alpha, "add", rs)
        o_new = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf, name="o_acc")
        nisa.scalar_tensor_tensor(o_new, o_run, "multiply", alpha, "add", o_ps)
        m_run, l_run, o_run = mx, l_new, o_new
    rl = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="inv_sum")
    nisa.reciprocal(rl, l_run)
    nisa.tensor_scalar(o_t, o_run, "multiply", rl, op1="multiply", operand1=keep)
