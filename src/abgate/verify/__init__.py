"""``abgate verify DIR``: every record in a result directory checked as it is on disk."""

from abgate.verify.check import Finding, VerifyReport, verify_directory

__all__ = ["Finding", "VerifyReport", "verify_directory"]
