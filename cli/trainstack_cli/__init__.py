"""`trainstack`: the operator CLI, a client of a deployed stack or of the local twin served on loopback."""
