"""Export, import, backup and restore: the versioned `hivemem.export` JSON Lines format."""
