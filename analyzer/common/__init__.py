"""What every layer uses and that knows nothing of diagrams or GPUs: errors, the pydantic base, element
types, sympy helpers, safe YAML, validation messages, shipped resources, atomic file writes and units."""
