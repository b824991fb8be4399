"""Stand-in for ``paramiko``: the harness only names ``SSHException`` in an ``except`` clause."""


class SSHException(Exception):
    pass
