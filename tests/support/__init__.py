"""Shared test support: helpers and fixtures that test modules import from here (never
from each other)."""
