"""trnsim's pytest plugin (entry point ``pytest11``).

Under ``TORCHNEURON_TARGET=sim`` it makes ``import nki`` in the tests' kernel files resolve to trnsim and prints a
header line naming the target.  With the variable unset it does nothing.
"""

import os


def _sim():
    return os.environ.get("TORCHNEURON_TARGET") == "sim"


def pytest_configure(config):
    if _sim():
        import trnsim
        trnsim.install_nki()


def pytest_report_header(config):
    if not _sim():
        return None
    import trnsim
    tg = trnsim.get_target()
    return f"trnsim {trnsim.__version__}: simulated {tg.marketing_name} ({tg.name}), LNC={tg.default_lnc}"
