"""cli: the `engine` command, a thin shell over engine."""
