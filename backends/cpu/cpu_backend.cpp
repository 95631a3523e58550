// PLACEHOLDER: the cpu backend.
