"""The command line: the typer app (``app``) and one module per sub-command (``commands``)."""
