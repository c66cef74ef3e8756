"""One start of `run` and `shell`: its steps, its plan and the client that holds it."""
