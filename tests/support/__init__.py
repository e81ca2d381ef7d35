"""Test support code shared by unit and integration tests (not collected as tests)."""
