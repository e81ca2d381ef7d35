"""Pure domain logic: no I/O, unit-tested without Redis or Qdrant."""
