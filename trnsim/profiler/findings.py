"""What explains a Timeline's time: per-instruction waits, and short findings in words.

* ``waits(tl)`` gives each row's ``evt_wait`` and ``dma_wait`` (as Neuron Explorer names them): the time an engine
  instruction could not start although its engine was free, because it waited for a semaphore of another
  engine's instruction (``evt_wait``) or for a DMA transfer (``dma_wait``).  For a DMA transfer, ``dma_wait`` is
  the time its data waited for busy DMA engines after its fixed cost.
* ``dependency_latency(tl)``: the part of the critical path that is instructions' fixed latency after their
  cost (the static overhead and the SBUF/PSUM access requests a dependent instruction waits for, see
  ``machine/scheduler.py``); ``dge_time(tl)``: descriptor generation per mode, how much of the time transfers
  waited for it and how much of the critical path it is.
* ``findings(tl)`` turns the Timeline into a few sentences with the figures behind them ("Tensor Engine idle
  waiting for DMA 54% of the time"), each computed from the rows, never from a model of the kernel.
"""

from __future__ import annotations

from ..machine.timeline import Timeline, union_length

__all__ = ["waits", "findings", "hfu", "descriptor_overhead", "hbm_peak_share", "dependency_latency", "dge_time"]

_COMPUTE = ("tensor", "vector", "scalar", "gpsimd")


def waits(tl: Timeline):
    """``(evt_wait, dma_wait)``: two lists of ns, one value per row."""
    n = len(tl)
    evt = [0.0] * n
    dma = [0.0] * n
    free = {}
    fixed = tl.target.dma_fixed_ns
    dge = {r: (mode, en) for r, mode, _, _, en in tl.dge}
    for i in range(n):
        e = tl.engine[i]
        if e == "dma":
            # after its descriptor generation (isa/dma_dge.py) and fixed cost, a transfer waits only for the DMA
            # engines it shares with earlier transfers or for its queue
            g = dge.get(i)
            t0 = tl.start[i] if g is None else max(tl.start[i], g[1])
            dma[i] = max(0.0, tl.data_start[i] - (t0 + fixed))
            if g is not None and g[0] == 1:          # swdge ran on the GpSimd Engine
                free[(tl.core[i], "gpsimd")] = g[1]
            continue
        key = (tl.core[i], e)
        f = free.get(key, 0.0)
        gap = tl.start[i] - f
        if gap > 1e-9:
            b = tl.bind[i]
            if b >= 0 and tl.engine[b] == "dma":
                dma[i] = gap
            elif b >= 0:
                evt[i] = gap
        free[key] = tl.end[i]
    return evt, dma


def hfu(tl: Timeline) -> float:
    """Hardware flops utilisation: the fraction of the Tensor Engine's peak the PE array was occupied
    multiplying (a matmul occupies the whole 128x128 array for its cycles however few rows or columns it
    uses), over cores and total time.  MFU counts only the flops of the operands' true sizes."""
    tot = tl.total_ns
    if tot <= 0:
        return 0.0
    busy = sum(w for e, w, op in zip(tl.engine, tl.work, tl.opcode) if e == "tensor" and "matmul" in op)
    return busy / (tot * tl.ncores)


def descriptor_overhead(tl: Timeline):
    """``(share, small_share)``: of the DMA engines' busy time, the fraction above what the bytes need at the
    practical rate (descriptor / packet-rate time), and the fraction of DMA time spent in transfers under
    2 KiB per partition."""
    rate = tl.target.dma_bytes_per_ns_per_engine
    ppe = tl.target.dma_partitions_per_engine
    total = over = small = 0.0
    for e, w, nq, nb in zip(tl.engine, tl.work, tl.nqueues, tl.nbytes):
        if e != "dma" or nq <= 0 or w <= 0:
            continue
        ideal = nb / (nq * rate)
        total += w * nq
        over += max(0.0, w - ideal) * nq
        if nb / (nq * ppe) < 2048:
            small += w * nq
    if total <= 0:
        return 0.0, 0.0
    return over / total, small / total


def hbm_peak_share(tl: Timeline):
    """``(share, in_flight_ns)``: the chip's HBM traffic while any HBM transfer is in flight, as a fraction of the
    chip's peak (``Target.hbm_peak_bytes_per_s``), and how long transfers were in flight (the union of their data
    intervals).  Near 1, the cores' transfers were sharing the whole peak (``machine.hbm_share``)."""
    iv = sorted((s, e) for s, e, h in zip(tl.data_start, tl.end, tl.hbm_bytes) if h and e > s)
    if not iv:
        return 0.0, 0.0
    span = 0.0
    cs, ce = iv[0]
    for s, e in iv[1:]:
        if s > ce:
            span += ce - cs
            cs, ce = s, e
        elif e > ce:
            ce = e
    span += ce - cs
    hb = sum(tl.hbm_bytes)
    return hb / (span * tl.target.hbm_peak_bytes_per_s * 1e-9), span


def dependency_latency(tl: Timeline) -> float:
    """The fraction of the total time the critical path spends in compute instructions' latency after their cost
    (``end`` to ``done``: the static overhead and SBUF/PSUM access requests their successors waited for)."""
    tot = tl.total_ns
    spans = tl.critical_path_spans()
    if tot <= 0 or not spans:
        return 0.0
    lat = 0.0
    for i, s, t_after in spans:
        if tl.engine[i] != "dma":
            lat += max(0.0, min(tl.done[i], t_after) - max(tl.end[i], s))
    return lat / tot


def dge_time(tl: Timeline):
    """Descriptor generation on the device (``isa/dma_dge.py``): ``(per_mode, waiting, on_path)`` with
    ``per_mode[mode] = (DMA instructions, DGE busy ns)`` for "swdge" (on the GpSimd Engine) and "hwdge" (the two
    hardware DGE blocks); ``waiting``: the fraction of the time at least one transfer was waiting, from its trigger,
    for its descriptors (queueing for the DGE included); ``on_path``: the fraction of the total time the critical
    path spends waiting for descriptors (the same, for the transfers on the path)."""
    tot = tl.total_ns
    per = {}
    iv = []
    spans = {}
    for r, mode, _, s, e in tl.dge:
        k = "swdge" if mode == 1 else "hwdge"
        n, b = per.get(k, (0, 0.0))
        per[k] = (n + 1, b + (e - s))
        if e > tl.start[r]:
            iv.append((tl.start[r], e))
        spans[r] = (s, e)
    if tot <= 0 or not per:
        return per, 0.0, 0.0
    span = union_length(iv)
    on = 0.0
    for i, s, _ in tl.critical_path_spans():   # a DMA row's DGE lies in its wait, before its own part
        g = spans.get(i)
        if g is not None:                # the transfer waited from its trigger to its descriptors' end
            p = tl.bind[i]
            lo = max(tl.start[i], tl.done[p] if p >= 0 else 0.0)      # from its trigger: queueing included
            on += max(0.0, min(g[1], s) - lo)
    return per, span / tot, on / tot


def findings(tl: Timeline, limit=6):
    """A few sentences on where the time went, most important first."""
    tot = tl.total_ns
    if tot <= 0 or not len(tl):
        return []
    out = []
    evt, dma = waits(tl)
    busy = tl.busy_ns()
    crit = tl.critical_path_share()
    ncores = tl.ncores
    for e in _COMPUTE:
        n_e = sum(1 for x in tl.engine if x == e)
        if not n_e:
            continue
        idle_dma = sum(d for d, x in zip(dma, tl.engine) if x == e)
        # a wait bound to the same engine's previous instruction is that instruction's latency, not a semaphore
        idle_own = sum(v for v, x, b in zip(evt, tl.engine, tl.bind) if x == e and b >= 0 and tl.engine[b] == e)
        idle_evt = sum(v for v, x in zip(evt, tl.engine) if x == e) - idle_own
        if idle_dma / (tot * ncores) >= 0.10:
            out.append((idle_dma, f"{e.capitalize()} Engine idle waiting for DMA {100 * idle_dma / (tot * ncores):.0f}% "
                                  f"of the time: more transfers in flight (multi-buffering) or larger ones would "
                                  f"hide it"))
        # semaphore waits matter when the engine is on the critical path (else it simply has little to do)
        if idle_evt / (tot * ncores) >= 0.10 and crit.get(e, 0.0) >= 0.10:
            out.append((idle_evt, f"{e.capitalize()} Engine waiting on other engines' results (semaphores) "
                                  f"{100 * idle_evt / (tot * ncores):.0f}% of the time"))
        if idle_own / (tot * ncores) >= 0.10:
            out.append((idle_own, f"{e.capitalize()} Engine idle waiting for its own previous instructions' results "
                                  f"{100 * idle_own / (tot * ncores):.0f}% of the time (each dependent instruction "
                                  f"waits for the static overhead and SBUF/PSUM access requests of the one before): "
                                  f"interleave independent tiles or fuse dependent instructions"))
    lat = dependency_latency(tl)
    if lat >= 0.10:
        out.append((lat * tot, f"{100 * lat:.0f}% of the critical path is dependent instructions' fixed latency "
                               f"(static overhead ~{tl.target.static_overhead_cycles} cycles + "
                               f"~{tl.target.access_request_cycles} cycles per SBUF/PSUM operand, after each "
                               f"cost): fewer, larger instructions or independent work between them would hide it"))
    per, waiting, on_path = dge_time(tl)
    if per and (on_path >= 0.05 or waiting >= 0.25):
        what = "; ".join(f"{m} for {n_d} DMA instructions, {b_d / 1e3:.1f} us "
                         f"{'on the GpSimd Engine' if m == 'swdge' else 'on the two hardware DGE blocks'}"
                         for m, (n_d, b_d) in sorted(per.items()))
        out.append((on_path * tot, f"descriptor generation on the device ({what}): transfers were waiting for "
                                   f"descriptors {100 * waiting:.0f}% of the time, {100 * on_path:.0f}% of the "
                                   f"critical path; dge_mode=none (pre-computed descriptors) costs nothing on the "
                                   f"device where the access pattern allows it"))
    over, small = descriptor_overhead(tl)
    dma_busy = sum(v for (c, e), v in busy.items() if e == "dma")
    if small >= 0.25 and over >= 0.10:
        out.append((over * dma_busy, f"DMAs under 2 KiB per partition: {100 * small:.0f}% of DMA time, and "
                                     f"{100 * over:.0f}% of DMA engine time is descriptor (packet-rate) overhead "
                                     f"beyond what the bytes need; move >= 2-4 KiB per partition per transfer"))
    hshare, hspan = hbm_peak_share(tl)
    if hshare >= 0.9:
        pk = tl.target.hbm_peak_bytes_per_s
        out.append((hspan, f"HBM at the chip's peak: while transfers were in flight ({100 * hspan / tot:.0f}% of the "
                           f"time) the cores moved {hshare * pk * 1e-9:.0f} GB/s, {100 * hshare:.0f}% of the chip's "
                           f"{pk * 1e-12:.1f} TB/s, shared by the transfers in flight: more cores or DMA queues "
                           f"add nothing; fewer HBM bytes (reuse on chip) would"))
    top = max(((k, v) for k, v in crit.items() if k != "wait"), key=lambda kv: kv[1], default=None)
    if top and top[1] >= 0.5:
        out.append((top[1] * tot, f"{top[0]}-bound: {100 * top[1]:.0f}% of the critical path is on "
                                  f"{'the DMA queues' if top[0] == 'dma' else 'the ' + top[0] + ' engine'}"))
    if crit.get("wait", 0.0) >= 0.2:
        out.append((crit["wait"] * tot, f"{100 * crit['wait']:.0f}% of the critical path is waiting (semaphores "
                                        f"between engines or cores, descriptor generation before transfers): fewer "
                                        f"synchronisations, dge_mode=none where the access pattern allows it"))
    mfu = tl.mfu
    h = hfu(tl)
    if h > 0.05 and mfu < 0.5 * h:
        out.append((0.0, f"MFU {100 * mfu:.1f}% against HFU {100 * h:.1f}%: matmuls use a fraction of the 128x128 "
                         f"array (small contraction or stationary tiles)"))
    out.sort(key=lambda x: -x[0])
    return [s for _, s in out[:limit]]
