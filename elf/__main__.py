"""``python -m elf`` is the ``elf`` command."""
import sys

from elf.cli import main

sys.exit(main())
