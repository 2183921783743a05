"""Test support: local servers that speak real wire protocols."""
