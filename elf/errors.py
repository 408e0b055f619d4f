"""``ElfError``: an input problem the user can fix. The ``elf`` command (``elf/cli.py``) prints it as
one line and exits with status 2, without a traceback; every layer may raise it."""


class ElfError(Exception):
    """An input problem the user can fix: printed as one line, exit code 2, no traceback."""
