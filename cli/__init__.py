"""The `lagtrace` command line: thin wrappers over services/."""
