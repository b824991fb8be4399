import pytest

from trnsim.targets import TRN1, TRN2, TRN3, get_target


def test_trn2_figures_follow_hardware_md():
    assert TRN2.sbuf_partitions == 128 and TRN2.sbuf_partition_bytes == 224 * 1024
    assert TRN2.sbuf_bytes == 28 * 1024 * 1024
    assert TRN2.psum_partition_bytes == 16 * 1024 and TRN2.psum_banks == 8 and TRN2.psum_bank_bytes == 2048
    assert abs(TRN2.tensor_bf16_flops_per_core - 78.6e12) < 0.1e12
    assert TRN2.dma_bytes_per_ns_per_core == 16 * 23
    assert TRN2.hbm_bytes_per_chip == 96 * 2**30
    assert TRN2.cycles_to_ns("vector", 960) == pytest.approx(1000.0)


def test_trn3_has_more_sbuf_and_faster_dma_than_trn2():
    assert TRN3.sbuf_partition_bytes > TRN2.sbuf_partition_bytes > TRN1.sbuf_partition_bytes
    assert TRN3.dma_bytes_per_ns_per_engine > TRN2.dma_bytes_per_ns_per_engine
    assert TRN3.psum_bf16_accumulate and not TRN2.psum_bf16_accumulate


@pytest.mark.parametrize("env,name", [("trn1", "trn1"), ("gen2", "trn1"), ("gen3", "trn2"), ("TRN3", "trn3"),
                                      ("gen4", "trn3")])
def test_env_override(monkeypatch, env, name):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", env)
    assert get_target().name == name


def test_default_is_trn2(monkeypatch):
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE", raising=False)
    assert get_target() is TRN2


def test_bad_env_names_variable(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn9")
    with pytest.raises(ValueError, match="NEURON_PLATFORM_TARGET_OVERRIDE.*trn9.*trn1, trn2, trn3"):
        get_target()


def test_targets_are_frozen():
    with pytest.raises(Exception):
        TRN2.sbuf_partitions = 256
