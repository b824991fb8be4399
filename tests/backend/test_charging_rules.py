"""How the device charges some op families (charging.op_time): a sum over leading dimensions (the cheaper of
(cols - 1) elementwise combines of output-sized slices and a row reduction of short rows), a backward op without a
kernel (the roofline of its own operands, once), and gathers (the bytes they pick, not their source)."""

import torch

from trnsim.backend import charging, costs
from trnsim.backend.shape_only import device_target


def test_sum_over_the_batch_is_slice_combines_when_cheaper():
    costs.clear_memo()
    x = torch.empty(16, 128, 1024)
    out = torch.empty(1, 128, 1024)
    with device_target("trn1") as tg:
        ns, kind, fl, nb = charging.op_time("sum", "reduce", (x, [0], True), out)
        rows, cols = 128 * 1024, 16
        comb = costs.elementwise_cost(tg, rows, "float32", "binary", "add")
        row = costs.reduction_cost(tg, rows, cols, "float32", "add")
        launch = costs.launch_ns(tg)
        assert ns == min(launch + (cols - 1) * comb[0], launch + row[0])
        assert ns < launch + row[0]                  # short rows: the combines win here
        assert (fl, nb) == ((cols - 1) * comb[1], (cols - 1) * comb[2])
        assert kind == "native"


def test_sum_over_the_last_dimension_is_a_row_reduction():
    costs.clear_memo()
    x = torch.empty(16, 128, 1024)
    out = torch.empty(16, 128)
    with device_target("trn1") as tg:
        ns = charging.op_time("sum", "reduce", (x, [-1]), out)[0]
        assert ns == costs.launch_ns(tg) + costs.reduction_cost(tg, 16 * 128, 1024, "float32", "add")[0]
        # a middle dimension is not leading: a row reduction too
        ns_mid = charging.op_time("sum", "reduce", (x, [1]), torch.empty(16, 1024))[0]
        assert ns_mid == costs.launch_ns(tg) + costs.reduction_cost(tg, 16 * 1024, 128, "float32", "add")[0]


def test_leading_dims():
    x = torch.empty(4, 5, 6)
    assert charging._leading_dims((x, [0]), x) and charging._leading_dims((x, [1, 0]), x)
    assert charging._leading_dims((x, 0), x)
    assert not charging._leading_dims((x, [0, 1, 2]), x)        # all of them: a full reduction
    assert not charging._leading_dims((x, [1]), x) and not charging._leading_dims((x, [-1]), x)
    assert not charging._leading_dims((x,), x)


def test_backward_without_a_kernel_is_the_roofline_of_its_own_operands_once():
    costs.clear_memo()
    g, y = torch.empty(256, 30522), torch.empty(256, 30522)     # wider than the softmax kernel's rows
    with device_target("trn1") as tg:
        ns, kind, fl, nb = charging.op_time("_log_softmax_backward_data", "backward:log_softmax",
                                            (g, y, 1, torch.float32), torch.empty(256, 30522))
        est = charging._estimate((g, y, 1, torch.float32), torch.empty(256, 30522), costs.launch_ns(tg))
        assert (ns, kind, fl, nb) == est
        assert nb == 3 * 256 * 30522 * 4                      # gradient and output in, gradient out: once each
        # with a kernel (rows that fit): twice the forward kernel, as before
        g2 = torch.empty(256, 1024)
        ns2, kind2, _, _ = charging.op_time("_log_softmax_backward_data", "backward:log_softmax",
                                            (g2, g2, 1, torch.float32), torch.empty(256, 1024))
        fwd = costs.softmax_cost(tg, 256, 1024, "float32", log=True)[0]
        assert kind2 == "estimated" and ns2 == costs.launch_ns(tg) + 2 * fwd


def test_gathers_move_what_they_pick_not_their_source():
    table, idx = torch.empty(30522, 1024), torch.empty(16, 128, dtype=torch.int64)
    out = torch.empty(16, 128, 1024)
    with device_target("trn1") as tg:
        launch = costs.launch_ns(tg)
        ns, kind, fl, nb = charging.op_time("embedding", "gather", (table, idx), out)
        assert nb == 2 * out.numel() * 4 + idx.numel() * 8
        assert (kind, fl) == ("estimated", float(out.numel()))
        assert ns == launch + costs.roofline_ns(tg, fl, nb)
        assert ns < charging._estimate((table, idx), out, launch)[0]       # the whole table is not read
        logits, target = torch.empty(2048, 30522), torch.empty(2048, dtype=torch.int64)
        loss = torch.empty(())
        nb_f = charging.op_time("nll_loss_forward", "gather", (logits, target, None, 1, -100), (loss, loss))[3]
        assert nb_f == 2048 * 4 + 2048 * 8 + 2 * 4                         # one value per target, the loss
        g = torch.empty(())
        nb_b = charging.op_time("nll_loss_backward", "gather", (g, logits, target, None, 1, -100, g),
                                torch.empty(2048, 30522))[3]
        assert nb_b == 2048 * 30522 * 4 + 2048 * 8 + 4                     # the dense gradient written once
