"""GitHub: the check-runs client and the webhook receiver's domain."""
