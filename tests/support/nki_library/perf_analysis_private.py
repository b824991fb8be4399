"""Stand-in for nki-library's ``test/utils/perf_analysis_private.py`` (not in the published snapshot): analysis of
hardware profiler traces, used only with ``--enable-perf-analysis`` on hardware.  Installed as
``test.utils.perf_analysis_private`` by ``trnsim_nkilib_plugin`` when missing."""


def analyze_trace(*args, **kwargs):
    raise RuntimeError("nki-library stand-in: perf analysis of hardware traces is not available in simulation mode")
