"""Hardware rules broken on purpose: each ``Rule`` is a kernel body that must raise ``NkiValidationError``
naming the operand (or the instruction)."""

from __future__ import annotations

from .harness import _M, _REG, _new


# ============================================================================================= rules
class Rule:
    """A kernel breaking one documented rule: it must raise NkiValidationError naming ``operand`` (or, when
    ``operand`` is None, naming the instruction).  Rules run on trn2 unless they name another target (the limits
    differ per target: PSUM bf16 accumulation on trn3, no double-row or range_select on trn1)."""

    def __init__(self, desc, body, operand, arrays=(), target="trn2", instr=None, match=None):
        self.desc, self.body, self.operand, self.arrays, self.target, self.instr, self.match = \
            desc, body, operand, arrays, target, instr, match


def _R(name, *rules):
    _REG.setdefault(name, {})["rules"] = lambda: list(rules)


def _nd(shape, dt="float32", space="sbuf"):
    return _new(shape, dt, space)


def _define_rules():
    nisa, nl = _M["nisa"], _M["nl"]
    mm = nisa.nc_matmul

    def mm_body(s_shape, m_shape, d_shape, sdt="bfloat16", mdt="bfloat16", ddt="float32", s_sp="sbuf",
                m_sp="sbuf", d_sp="psum", dslice=None, **kw):
        def body():
            s, m = _nd(s_shape, sdt, s_sp), _nd(m_shape, mdt, m_sp)
            d = _nd(d_shape, ddt, d_sp)
            mm(d if dslice is None else d[:, dslice[0]:dslice[1]], s, m, **kw)
        return body

    def wide_view(dt="bfloat16"):
        a = _nd((128, 2, 64), dt)
        return a.ap([[64, 256], [1, 64]])      # a view spanning 256 partitions

    _R("nisa.nc_matmul",
       Rule("stationary in PSUM (Tensor Engine reads SBUF only)", mm_body((128, 128), (128, 512), (128, 512),
                                                                          s_sp="psum"), "stationary"),
       Rule("moving in PSUM", mm_body((128, 128), (128, 64), (128, 64), m_sp="psum"), "moving"),
       Rule("dst in SBUF (Tensor Engine writes PSUM only)", mm_body((128, 128), (128, 512), (128, 512), d_sp="sbuf"),
            "dst"),
       Rule("contraction over 128 partitions (a 256-partition stationary view)",
            lambda: mm(_nd((64, 64), "float32", "psum"), wide_view(), _nd((128, 64), "bfloat16")), "stationary"),
       Rule("contraction over the PE tile's rows (tile_size (64, 128), K=128)",
            mm_body((128, 64), (128, 64), (64, 64), tile_position=(0, 0), tile_size=(64, 128)), "stationary"),
       Rule("stationary free size 129 > 128", mm_body((128, 129), (128, 64), (128, 64)), "stationary"),
       Rule("moving free size 513 > 512", mm_body((128, 128), (128, 513), (128, 513)), "moving"),
       Rule("output crosses a 2 KiB PSUM bank", mm_body((128, 128), (128, 512), (128, 1024), dslice=(256, 768)), "dst"),
       Rule("output of 1 element at the end of a bank plus one", mm_body((1, 1), (1, 2), (1, 1024), dslice=(511, 513)),
            "dst"),
       Rule("fp32 stationary with bf16 moving", mm_body((128, 128), (128, 64), (128, 64), sdt="float32"), "moving"),
       Rule("integer operands", mm_body((128, 128), (128, 64), (128, 64), sdt="int32", mdt="int32"), "stationary"),
       Rule("bf16 PSUM output on trn2", mm_body((128, 128), (128, 64), (128, 64), ddt="bfloat16"), "dst",
            target="trn2"),
       Rule("contraction sizes differ", mm_body((128, 128), (64, 64), (128, 64)), "moving"),
       Rule("dst shape is not [M, N]", mm_body((128, 64), (128, 64), (64, 32)), "dst"),
       Rule("stationary start partition 16 with 48 partitions",
            lambda: mm(_nd((64, 64), "float32", "psum"), _nd((128, 64), "bfloat16")[16:64],
                       _nd((48, 64), "bfloat16")), "stationary"),
       Rule("double_row on trn1", mm_body((128, 2, 64), (128, 2, 256), (64, 256), sdt="float8_e4m3",
                                          mdt="float8_e4m3", perf_mode="double_row"), "perf_mode", target="trn1"),
       Rule("double_row with bf16 inputs", mm_body((128, 2, 64), (128, 2, 256), (64, 256),
                                                   perf_mode="double_row"), "stationary"),
       Rule("tile_position not a multiple of tile_size",
            mm_body((64, 64), (64, 512), (64, 512), tile_position=(32, 0), tile_size=(64, 64)), "tile_position[0]"))

    _R("nisa.nc_transpose",
       Rule("vector engine over 32x32", lambda: nisa.nc_transpose(_nd((64, 64)), _nd((64, 64)),
                                                                   engine=nisa.vector_engine), "data"),
       Rule("dtype mismatch", lambda: nisa.nc_transpose(_nd((64, 128), "float32", "psum"), _nd((128, 64), "bfloat16")),
            "dst"),
       Rule("tensor engine output to SBUF", lambda: nisa.nc_transpose(_nd((64, 128)), _nd((128, 64)),
                                                                       engine=nisa.tensor_engine), "dst"),
       Rule("tensor engine input in PSUM", lambda: nisa.nc_transpose(_nd((64, 128), space="psum"),
                                                                      _nd((128, 64), space="psum"),
                                                                      engine=nisa.tensor_engine), "data"),
       Rule("dst shape not the transpose", lambda: nisa.nc_transpose(_nd((16, 16)), _nd((16, 8))), "dst"))

    def tt(d, a, b, op=None, **kw):
        return lambda: nisa.tensor_tensor(d(), a(), b(), op=op or nl.add, **kw)

    _R("nisa.tensor_tensor",
       Rule("operand view over 128 partitions", lambda: (lambda v: nisa.tensor_tensor(v, v, v, op=nl.add))(
           wide_view("float32")), "dst"),
       Rule("both inputs in PSUM", tt(lambda: _nd((128, 64)), lambda: _nd((128, 64), space="psum"),
                                      lambda: _nd((128, 64), space="psum")), "data2"),
       Rule("free sizes differ", tt(lambda: _nd((128, 64)), lambda: _nd((128, 64)), lambda: _nd((128, 32))), "data2"),
       Rule("partition counts differ", tt(lambda: _nd((128, 64)), lambda: _nd((64, 64)), lambda: _nd((128, 64))),
            "data1"),
       Rule("bitwise op on float tiles", tt(lambda: _nd((128, 64)), lambda: _nd((128, 64)), lambda: _nd((128, 64)),
                                            op=nl.bitwise_and), "dst"),
       Rule("on the tensor engine", tt(lambda: _nd((128, 64)), lambda: _nd((128, 64)), lambda: _nd((128, 64)),
                                       engine=nisa.tensor_engine), "engine"),
       Rule("GpSimd (power) reading PSUM", tt(lambda: _nd((128, 64)), lambda: _nd((128, 64), space="psum"),
                                              lambda: _nd((128, 64)), op=nl.power), "data1"),
       Rule("input in HBM", lambda: nisa.tensor_tensor(_nd((128, 64)), _nd((128, 64), space="hbm"), _nd((128, 64)),
                                                       op=nl.add), "data1"),
       Rule("start partition 16 with 48 partitions", lambda: (lambda a: nisa.tensor_tensor(a[16:64], a[16:64],
                                                                                           a[16:64], op=nl.add))(
           _nd((128, 64))), "dst"),
       Rule("unknown ALU op", tt(lambda: _nd((128, 64)), lambda: _nd((128, 64)), lambda: _nd((128, 64)),
                                 op="frobnicate"), "op"))

    _R("nisa.memset",
       Rule("48 partitions starting at 16", lambda: nisa.memset(_nd((128, 64))[16:64], 0.0), "dst"),
       Rule("96 partitions starting at 32", lambda: nisa.memset(_nd((128, 64))[32:128], 0.0), "dst"),
       Rule("20 partitions crossing a 32-partition quadrant (16..36)", lambda: nisa.memset(_nd((128, 64))[16:36], 0.0),
            "dst"),
       Rule("PSUM free size 4097 > 4096", lambda: nisa.memset(_nd((128, 4097), "bfloat16", "psum"), 0.0), "dst"),
       Rule("SBUF free size 65537 > 65536", lambda: nisa.memset(_nd((2, 65537), "uint8"), 0), "dst"),
       Rule("dst in HBM", lambda: nisa.memset(_nd((128, 64), space="hbm"), 0.0), "dst"),
       Rule("GpSimd writing PSUM", lambda: nisa.memset(_nd((128, 64), space="psum"), 0.0, engine=nisa.gpsimd_engine),
            "dst"),
       Rule("on the tensor engine", lambda: nisa.memset(_nd((128, 64)), 0.0, engine=nisa.tensor_engine), "engine"))

    _R("nisa.tensor_copy",
       Rule("GpSimd reading PSUM", lambda: nisa.tensor_copy(_nd((128, 64)), _nd((128, 64), space="psum"),
                                                            engine=nisa.gpsimd_engine), "src"),
       Rule("dst in HBM", lambda: nisa.tensor_copy(_nd((128, 64), space="hbm"), _nd((128, 64))), "dst"),
       Rule("partition counts differ", lambda: nisa.tensor_copy(_nd((64, 64)), _nd((128, 64))), "src"),
       Rule("free sizes differ", lambda: nisa.tensor_copy(_nd((128, 64)), _nd((128, 65))), "src"),
       Rule("SBUF free size 65537", lambda: nisa.tensor_copy(_nd((1, 65537), "uint8"), _nd((1, 65537), "uint8")),
            "dst"))

    _R("nisa.tensor_scalar",
       Rule("operand0 not [P, 1]", lambda: nisa.tensor_scalar(_nd((128, 64)), _nd((128, 64)), nl.add, _nd((128, 2))),
            "operand0"),
       Rule("op1 without operand1", lambda: nisa.tensor_scalar(_nd((128, 64)), _nd((128, 64)), nl.add, 1.0,
                                                               op1=nl.multiply), "operand1"),
       Rule("bitwise op1 after arithmetic op0", lambda: nisa.tensor_scalar(_nd((128, 64), "int32"),
                                                                           _nd((128, 64), "int32"), nl.add, 1,
                                                                           op1=nl.bitwise_and, operand1=3), "op1"),
       Rule("GpSimd reading PSUM", lambda: nisa.tensor_scalar(_nd((128, 64)), _nd((128, 64), space="psum"), nl.add,
                                                              1.0, engine=nisa.gpsimd_engine), "data"))

    _R("nisa.activation",
       Rule("bias not [P, 1]", lambda: nisa.activation(_nd((128, 64)), nl.exp, _nd((128, 64)), bias=_nd((64, 1))),
            "bias"),
       Rule("data in HBM", lambda: nisa.activation(_nd((128, 64)), nl.exp, _nd((128, 64), space="hbm")), "data"),
       Rule("unknown function", lambda: nisa.activation(_nd((128, 64)), "frobnicate", _nd((128, 64))), "op"),
       Rule("reduce_res not [P, 1]", lambda: nisa.activation(_nd((128, 64)), nl.exp, _nd((128, 64)), reduce_op=nl.add,
                                                             reduce_res=_nd((128, 2))), "reduce_res"),
       Rule("free sizes differ", lambda: nisa.activation(_nd((128, 64)), nl.exp, _nd((128, 32))), "data"))
    _R("nisa.activation_reduce",
       Rule("reduce_res not [P, 1]", lambda: nisa.activation_reduce(_nd((128, 64)), nl.exp, _nd((128, 64)), nl.add,
                                                                    _nd((64, 1))), "reduce_res"))
    _R("nisa.exponential",
       Rule("max_value not [P, 1]", lambda: nisa.exponential(_nd((128, 64)), _nd((128, 64)), max_value=_nd((128, 4))),
            "max_value"),
       Rule("src in HBM", lambda: nisa.exponential(_nd((128, 64)), _nd((128, 64), space="hbm")), "src"))
    _R("nisa.reciprocal",
       Rule("on the GpSimd engine", lambda: nisa.reciprocal(_nd((128, 64)), _nd((128, 64)), engine=nisa.gpsimd_engine),
            "engine"),
       Rule("free sizes differ", lambda: nisa.reciprocal(_nd((128, 64)), _nd((128, 8))), "data"))
    _R("nisa.scalar_tensor_tensor",
       Rule("operand1 free size differs", lambda: nisa.scalar_tensor_tensor(_nd((128, 64)), _nd((128, 64)), nl.add,
                                                                            1.0, nl.add, _nd((128, 32))), "operand1"),
       Rule("operand0 not [P, 1]", lambda: nisa.scalar_tensor_tensor(_nd((128, 64)), _nd((128, 64)), nl.add,
                                                                     _nd((128, 3)), nl.add, _nd((128, 64))),
            "operand0"))
    _R("nisa.tensor_tensor_scan",
       Rule("both inputs in PSUM", lambda: nisa.tensor_tensor_scan(_nd((128, 64)), _nd((128, 64), space="psum"),
                                                                   _nd((128, 64), space="psum"), 0.0, nl.multiply,
                                                                   nl.add), "data1"),
       Rule("initial not [P, 1]", lambda: nisa.tensor_tensor_scan(_nd((128, 64)), _nd((128, 64)), _nd((128, 64)),
                                                                  _nd((128, 2)), nl.multiply, nl.add), "initial"))
    _R("nisa.tensor_scalar_reduce",
       Rule("reduce_res not [P, 1]", lambda: nisa.tensor_scalar_reduce(_nd((128, 64)), _nd((128, 64)), nl.add, 1.0,
                                                                       nl.add, reduce_res=_nd((128, 2))), "reduce_res"))
    _R("nisa.tensor_reduce",
       Rule("reducing the partition axis", lambda: nisa.tensor_reduce(_nd((1, 64)), nl.add, _nd((128, 64)), axis=0),
            "axis"),
       Rule("axis not the last free dims", lambda: nisa.tensor_reduce(_nd((128, 8)), nl.add, _nd((128, 4, 8)), axis=1),
            "axis"),
       Rule("dst size wrong", lambda: nisa.tensor_reduce(_nd((128, 2)), nl.add, _nd((128, 64)), axis=1), "dst"),
       Rule("not a reduction op", lambda: nisa.tensor_reduce(_nd((128, 1)), nl.subtract, _nd((128, 64)), axis=1),
            "op"))
    _R("nisa.tensor_copy_predicated",
       Rule("float predicate", lambda: nisa.tensor_copy_predicated(_nd((128, 64)), _nd((128, 64)), _nd((128, 64))),
            "predicate"),
       Rule("src dtype differs from dst", lambda: nisa.tensor_copy_predicated(
           _nd((128, 64)), _nd((128, 64), "bfloat16"), _nd((128, 64), "uint8")), "src"))
    _R("nisa.bn_stats",
       Rule("free size 513 > 512 (bn_stats_fmax)", lambda: nisa.bn_stats(_nd((128, 6)), _nd((128, 513))), "data"),
       Rule("dst not 6 per partition", lambda: nisa.bn_stats(_nd((128, 4)), _nd((128, 64))), "dst"))
    _R("nisa.bn_aggr",
       Rule("free size not a multiple of 3", lambda: nisa.bn_aggr(_nd((128, 2)), _nd((128, 7))), "data"),
       Rule("dst not 2 per partition", lambda: nisa.bn_aggr(_nd((128, 3)), _nd((128, 6))), "dst"))
    _R("nisa.iota",
       Rule("dst in PSUM (GpSimd)", lambda: nisa.iota(_nd((128, 64), "int32", "psum"), [[1, 64]]), "dst"),
       Rule("pattern does not cover dst", lambda: nisa.iota(_nd((128, 64), "int32"), [[1, 32]]), "pattern"),
       Rule("more than 4 pattern entries", lambda: nisa.iota(_nd((128, 32), "int32"), [[1, 2]] * 5), "pattern"))
    _R("nisa.affine_select",
       Rule("on_true_tile in PSUM (GpSimd)", lambda: nisa.affine_select(_nd((128, 64)), [[-1, 64]], 1,
                                                                        _nd((128, 64), space="psum"), 0.0),
            "on_true_tile"),
       Rule("dst in PSUM (GpSimd)", lambda: nisa.affine_select(_nd((128, 64), space="psum"), [[-1, 64]], 1,
                                                               _nd((128, 64)), 0.0), "dst"),
       Rule("on_true_tile shape differs", lambda: nisa.affine_select(_nd((128, 64)), [[-1, 64]], 1, _nd((128, 32)),
                                                                     0.0), "on_true_tile"))
    _R("nisa.max8",
       Rule("src free size 7 < 8", lambda: nisa.max8(_nd((128, 8)), _nd((128, 7))), "src"),
       Rule("dst not 8 per partition", lambda: nisa.max8(_nd((128, 4)), _nd((128, 64))), "dst"))
    _R("nisa.nc_find_index8",
       Rule("float index dst", lambda: nisa.nc_find_index8(_nd((128, 8)), _nd((128, 64)), _nd((128, 8))), "dst"),
       Rule("vals not 8 per partition", lambda: nisa.nc_find_index8(_nd((128, 8), "uint32"), _nd((128, 64)),
                                                                    _nd((128, 4))), "vals"))
    _R("nisa.nc_match_replace8",
       Rule("dst free size differs", lambda: nisa.nc_match_replace8(_nd((128, 32)), _nd((128, 64)), _nd((128, 8)),
                                                                    0.0), "dst"))
    _R("nisa.nc_stream_shuffle",
       Rule("mask of 16 entries", lambda: nisa.nc_stream_shuffle(_nd((32, 8)), _nd((32, 8)), list(range(16))),
            "shuffle_mask"),
       Rule("mask entry 40", lambda: nisa.nc_stream_shuffle(_nd((32, 8)), _nd((32, 8)), [40] + [0] * 31),
            "shuffle_mask"),
       Rule("dtype mismatch", lambda: nisa.nc_stream_shuffle(_nd((32, 8), "bfloat16"), _nd((32, 8)), list(range(32))),
            "dst"))
    _R("nisa.select_reduce",
       Rule("predicate partitions differ", lambda: nisa.select_reduce(_nd((128, 64)), _nd((64, 64), "uint8"),
                                                                      _nd((128, 64)), 0.0), "predicate"))
    _R("nisa.range_select",
       Rule("not available on trn1", lambda: nisa.range_select(_nd((128, 64)), _nd((128, 64)), nl.greater_equal,
                                                               nl.less, 0.0, 8.0), None, target="trn1",
            instr="range_select"),
       Rule("bound0 not [P, 1]", lambda: nisa.range_select(_nd((128, 64)), _nd((128, 64)), nl.greater_equal, nl.less,
                                                           _nd((128, 2)), 8.0), "bound0"))
    _R("nisa.dma_copy",
       Rule("element counts differ", lambda: nisa.dma_copy(_nd((128, 32)), _nd((128, 64), space="hbm")), "dst"))
    _R("nisa.dma_transpose",
       Rule("dst in HBM", lambda: nisa.dma_transpose(_nd((64, 128), space="hbm"), _nd((128, 64), space="hbm")), "dst"),
       Rule("hardware DGE moves 2-byte dtypes only",
            lambda: nisa.dma_transpose(_nd((64, 16)), _nd((16, 64), space="hbm"), dge_mode=nisa.dge_mode.hwdge),
            "src"),
       Rule("unsupported axes", lambda: nisa.dma_transpose(_nd((64, 128)), _nd((128, 64), space="hbm"), axes=(0, 1)),
            "axes"))
    _R("nl.ndarray",
       Rule("256 partitions in SBUF", lambda: nl.ndarray((256, 64), nl.float32, buffer=nl.sbuf), "shape",
            match="number of partitions 256 exceed architecture limitation of 128"),
       Rule("129 partitions in PSUM", lambda: nl.ndarray((129, 64), nl.float32, buffer=nl.psum), "shape",
            match="number of partitions 129 exceed architecture limitation of 128"),
       Rule("over SBUF capacity", lambda: _both_live((128, 32 * 1024), nl.sbuf), "shape",
            match="SBUF allocation of .* does not fit"),
       Rule("over PSUM capacity", lambda: _both_live((128, 4096), nl.psum), "shape",
            match="PSUM allocation of .* does not fit"))


def _both_live(shape, buffer):
    """Two tiles live at the same time in program order (capacity counts live ranges, not Python objects)."""
    nisa, nl = _M["nisa"], _M["nl"]
    a, b = (nl.ndarray(shape, nl.float32, buffer=buffer) for _ in range(2))
    nisa.memset(a, 0.0)
    nisa.memset(b, 1.0)
    nisa.tensor_copy(a, b)
