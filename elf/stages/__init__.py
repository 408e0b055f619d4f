"""One module per ``elf`` subcommand. Stages own all file I/O; they call the computing packages."""
