"""Stand-in for ``fabric2`` (SSH to remote Trainium hosts): imported by the harness at start, never used in
simulation mode.  Any attempt to connect raises."""


class Result:
    pass


class Connection:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("nki-library stand-in: remote hosts (fabric2) are not available in simulation mode")
